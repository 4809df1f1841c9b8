//! The hand-written mirrors against libfabric's own headers: a C program
//! compiled against Debian's `rdma/*.h` (libfabric 1.17, installed by
//! scripts/install-deps.sh) prints every offset and size the provider
//! relies on, and each must equal the mirror's. The 2.x tails (past
//! 1.17's sizes) are checked against the sizes measured with 2.5's
//! headers, noted in the mirror.

use std::mem::{offset_of, size_of};
use std::process::Command;

use llc_fi::abi::*;

/// (C expression, Rust value).
fn checks() -> Vec<(&'static str, usize)> {
    macro_rules! off {
        ($c:literal, $t:ty, $f:ident) => {
            (
                concat!("offsetof(struct ", $c, ", ", stringify!($f), ")"),
                offset_of!($t, $f),
            )
        };
        ($c:literal, $t:ty, $f:ident => $cf:literal) => {
            (
                concat!("offsetof(struct ", $c, ", ", $cf, ")"),
                offset_of!($t, $f),
            )
        };
    }
    macro_rules! size {
        ($c:literal, $t:ty) => {
            (concat!("sizeof(struct ", $c, ")"), size_of::<$t>())
        };
    }
    vec![
        size!("fi_info", FiInfo),
        off!("fi_info", FiInfo, caps),
        off!("fi_info", FiInfo, addr_format),
        off!("fi_info", FiInfo, src_addr),
        off!("fi_info", FiInfo, handle),
        off!("fi_info", FiInfo, tx_attr),
        off!("fi_info", FiInfo, domain_attr),
        off!("fi_info", FiInfo, fabric_attr),
        off!("fi_info", FiInfo, nic),
        size!("fi_tx_attr", FiTxAttr),
        off!("fi_tx_attr", FiTxAttr, inject_size),
        off!("fi_tx_attr", FiTxAttr, tclass),
        size!("fi_rx_attr", FiRxAttr),
        off!("fi_rx_attr", FiRxAttr, iov_limit),
        size!("fi_ep_attr", FiEpAttr),
        off!("fi_ep_attr", FiEpAttr, type_ => "type"),
        off!("fi_ep_attr", FiEpAttr, mem_tag_format),
        off!("fi_ep_attr", FiEpAttr, auth_key),
        off!("fi_domain_attr", FiDomainAttr, threading),
        off!("fi_domain_attr", FiDomainAttr, av_type),
        off!("fi_domain_attr", FiDomainAttr, mr_mode),
        off!("fi_domain_attr", FiDomainAttr, cq_data_size),
        off!("fi_domain_attr", FiDomainAttr, mr_iov_limit),
        off!("fi_domain_attr", FiDomainAttr, caps),
        off!("fi_domain_attr", FiDomainAttr, auth_key),
        off!("fi_domain_attr", FiDomainAttr, mr_cnt),
        off!("fi_domain_attr", FiDomainAttr, tclass),
        ("sizeof(struct fi_domain_attr)", DOMAIN_ATTR_1_17_SIZE),
        size!("fi_fabric_attr", FiFabricAttr),
        off!("fi_fabric_attr", FiFabricAttr, api_version),
        size!("fi_provider", FiProvider),
        off!("fi_provider", FiProvider, name),
        off!("fi_provider", FiProvider, getinfo),
        off!("fi_provider", FiProvider, cleanup),
        size!("fi_ops", FiOps),
        size!("fid", FidT),
        size!("fi_ops_fabric", FiOpsFabric),
        size!("fid_fabric", FidFabric),
        off!("fid_fabric", FidFabric, api_version),
        size!("fi_ops_domain", FiOpsDomain),
        size!("fi_ops_mr", FiOpsMr),
        size!("fid_domain", FidDomain),
        size!("fid_mr", FidMr),
        off!("fid_mr", FidMr, key),
        size!("fi_mr_attr", FiMrAttr),
        size!("fi_av_attr", FiAvAttr),
        ("sizeof(struct fi_ops_av)", OPS_AV_1_17_SIZE),
        off!("fi_ops_av", FiOpsAv, straddr),
        size!("fid_av", FidAv),
        size!("fi_eq_attr", FiEqAttr),
        size!("fi_eq_entry", FiEqEntry),
        size!("fi_eq_err_entry", FiEqErrEntry),
        size!("fi_ops_eq", FiOpsEq),
        size!("fi_cq_attr", FiCqAttr),
        off!("fi_cq_attr", FiCqAttr, wait_set),
        size!("fi_cq_tagged_entry", FiCqTaggedEntry),
        ("sizeof(struct fi_cq_err_entry)", CQ_ERR_ENTRY_1_5_SIZE),
        off!("fi_cq_err_entry", FiCqErrEntry, olen),
        off!("fi_cq_err_entry", FiCqErrEntry, err_data_size),
        size!("fi_ops_cq", FiOpsCq),
        size!("fi_cntr_attr", FiCntrAttr),
        size!("fi_ops_cntr", FiOpsCntr),
        size!("fi_msg", FiMsg),
        size!("fi_msg_tagged", FiMsgTagged),
        off!("fi_msg_tagged", FiMsgTagged, ignore),
        size!("fi_ops_ep", FiOpsEp),
        size!("fi_ops_cm", FiOpsCm),
        size!("fi_ops_msg", FiOpsMsg),
        size!("fi_ops_tagged", FiOpsTagged),
        size!("fid_ep", FidEp),
        size!("fi_ops_rma", FiOpsRma),
        size!("fi_msg_rma", FiMsgRma),
        off!("fi_msg_rma", FiMsgRma, rma_iov_count),
        size!("fi_rma_iov", FiRmaIov),
        off!("fid_ep", FidEp, collective),
        ("FI_SELECTIVE_COMPLETION == (1ULL << 59)", 1),
        ("FI_CLASS_CNTR", FI_CLASS_CNTR),
        ("FI_GETWAITOBJ", FI_GETWAITOBJ as usize),
        ("FI_ETRUNC", errno::FI_ETRUNC as usize),
        ("FI_AV_COMPLETE", FI_AV_COMPLETE as usize),
        ("FI_EP_RDM", FI_EP_RDM as usize),
        ("FI_CQ_FORMAT_TAGGED", FI_CQ_FORMAT_TAGGED as usize),
        ("FI_MR_PROV_KEY", FI_MR_PROV_KEY as usize),
        ("FI_THREAD_DOMAIN", FI_THREAD_DOMAIN as usize),
    ]
}

#[test]
fn mirrors_match_debians_libfabric_headers() {
    if !std::path::Path::new("/usr/include/rdma/fabric.h").exists() {
        panic!(
            "libfabric-dev is missing (/usr/include/rdma/fabric.h): run scripts/install-deps.sh"
        );
    }
    let dir = std::env::temp_dir().join(format!("llc-fi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let checks = checks();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n\
         #include <rdma/fi_endpoint.h>\n#include <rdma/fi_eq.h>\n#include <rdma/fi_tagged.h>\n\
         #include <rdma/fi_cm.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_errno.h>\n#include <rdma/providers/fi_prov.h>\nint main(void) {\n",
    );
    for (expr, _) in &checks {
        c.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    std::fs::write(dir.join("layout.c"), c).unwrap();
    let exe = dir.join("layout");
    let out = Command::new("cc")
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let values: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let wrong: Vec<String> = checks
        .iter()
        .zip(&values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((expr, rust), c)| format!("{expr}: C {c}, mirror {rust}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "mirrors differ from the headers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_2x_tails_have_the_sizes_measured_with_2_5s_headers() {
    assert_eq!(size_of::<FiDomainAttr>(), 224);
    assert_eq!(size_of::<FiCqErrEntry>(), 88);
    assert_eq!(size_of::<FiOpsAv>(), 88);
}
