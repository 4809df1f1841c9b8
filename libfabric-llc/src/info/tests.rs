//! fi_getinfo(3)'s rules, as the MPIs and tools exercise them.

use super::*;

const V: u32 = fi_version(1, 17);

fn ifaces() -> Vec<(String, [u8; 6])> {
    vec![
        ("eth0".into(), [2, 0, 0, 0, 0, 1]),
        ("eth1".into(), [2, 0, 0, 0, 0, 2]),
    ]
}

/// A host with [`ifaces`], no live objects, `localhost` and `10.0.0.2`
/// (on eth1) as its names.
fn host(
    ifaces: &[(String, [u8; 6])],
    f: impl FnOnce(&Host) -> Result<Vec<Offer>, NoMatch>,
) -> Result<Vec<Offer>, NoMatch> {
    let this_host = |n: &str| match n {
        "localhost" => Some(None),
        "10.0.0.2" => Some(Some("eth1".to_string())),
        _ => None,
    };
    f(&Host {
        ifaces,
        known_fabric: &|_| false,
        known_domain: &|_, _| false,
        this_host: &this_host,
    })
}

fn ask(version: u32, h: &Hints) -> Result<Vec<Offer>, NoMatch> {
    host(&ifaces(), |host| {
        answer(version, None, None, 0, Some(h), host)
    })
}

#[test]
fn no_hints_offer_every_interface_with_every_capability() {
    let o = host(&ifaces(), |h| answer(V, None, None, 0, None, h)).unwrap();
    assert_eq!(o.len(), 2);
    assert_eq!(o[0].ifname, "eth0");
    // Everything, RMA with the registration modes it needs: MPICH takes the
    // caps of this answer into its hints (with those modes).
    assert_eq!(o[0].caps, CAPS);
    assert_eq!(o[0].threading, FI_THREAD_SAFE);
    assert_eq!(o[0].mr_mode, RMA_MR_MODE);
    // Every answer names its source: the interface, any port.
    assert_eq!(
        o[1].src_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 2], 0))
    );
}

#[test]
fn this_host_by_name_or_address_is_a_source_or_a_destination() {
    // localhost with FI_SOURCE: every interface, the port asked for.
    let o = host(&ifaces(), |h| {
        answer(V, Some("localhost"), Some("9228"), FI_SOURCE, None, h)
    })
    .unwrap();
    assert_eq!(o.len(), 2);
    assert_eq!(
        o[0].src_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 1], 9228))
    );
    // An address eth1 holds, with FI_SOURCE: eth1 only.
    let o = host(&ifaces(), |h| {
        answer(V, Some("10.0.0.2"), None, FI_SOURCE, None, h)
    })
    .unwrap();
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].ifname, "eth1");
    // localhost as the destination: each interface's own address.
    let o = host(&ifaces(), |h| {
        answer(V, Some("localhost"), Some("5"), 0, None, h)
    })
    .unwrap();
    assert_eq!(o.len(), 2);
    assert_eq!(
        o[1].dest_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 2], 5))
    );
    assert_eq!(
        o[1].src_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 2], 0))
    );
    // Another host's name is not resolved: peers are named by MAC.
    let e = host(&ifaces(), |h| {
        answer(V, Some("node7"), Some("5"), 0, None, h)
    })
    .unwrap_err();
    assert!(e.0.contains("[MAC]"), "{}", e.0);
    let e = host(&ifaces(), |h| {
        answer(V, Some("node7"), None, FI_SOURCE, None, h)
    })
    .unwrap_err();
    assert!(e.0.contains("this host"), "{}", e.0);
}

#[test]
fn transmit_and_receive_attributes_carry_only_their_side_s_capabilities() {
    let o = host(&ifaces(), |h| answer(V, None, None, 0, None, h)).unwrap();
    assert_eq!(
        o[0].caps & TX_CAPS & (FI_RECV | FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SOURCE),
        0
    );
    assert_eq!(o[0].caps & RX_CAPS & (FI_SEND | FI_READ | FI_WRITE), 0);
    assert_eq!(o[0].caps & RX_CAPS & FI_DIRECTED_RECV, FI_DIRECTED_RECV);
}

#[test]
fn capabilities_not_served_give_no_data() {
    for caps in [
        FI_ATOMIC,
        FI_MULTICAST,
        FI_COLLECTIVE,
        FI_HMEM,
        FI_NAMED_RX_CTX,
        FI_TRIGGER,
    ] {
        let h = Hints {
            caps: FI_MSG | caps,
            ..Hints::default()
        };
        assert!(ask(V, &h).is_err(), "caps {caps:#x} must not be answered");
    }
}

#[test]
fn primary_capabilities_come_back_only_when_asked() {
    let h = Hints {
        caps: FI_TAGGED,
        ..Hints::default()
    };
    let o = ask(V, &h).unwrap();
    assert_eq!(o[0].caps & PRIMARY_CAPS, FI_TAGGED);
    assert_eq!(o[0].caps & SECONDARY_CAPS, SECONDARY_CAPS);
}

#[test]
fn endpoint_types_other_than_rdm_give_no_data() {
    for t in [1, 2, 4, 5] {
        let h = Hints {
            ep: Some(EpHints {
                type_: t,
                ..EpHints::default()
            }),
            ..Hints::default()
        };
        assert!(ask(V, &h).is_err());
    }
    let rdm = Hints {
        ep: Some(EpHints {
            type_: FI_EP_RDM,
            ..EpHints::default()
        }),
        ..Hints::default()
    };
    assert!(ask(V, &rdm).is_ok());
}

#[test]
fn models_asked_for_are_echoed() {
    // MPICH checks that the answer says FI_THREAD_DOMAIN exactly.
    let h = Hints {
        domain: Some(DomainHints {
            threading: FI_THREAD_DOMAIN,
            control_progress: FI_PROGRESS_MANUAL,
            data_progress: FI_PROGRESS_MANUAL,
            av_type: FI_AV_TABLE,
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    let o = &ask(fi_version(2, 5), &h).unwrap()[0];
    assert_eq!(
        (o.threading, o.control_progress, o.data_progress, o.av_type),
        (
            FI_THREAD_DOMAIN,
            FI_PROGRESS_MANUAL,
            FI_PROGRESS_MANUAL,
            FI_AV_TABLE
        )
    );
}

#[test]
fn sizes_beyond_the_provider_give_no_data() {
    let too = [
        Hints {
            tx: Some(TxHints {
                inject_size: INJECT_SIZE + 1,
                ..TxHints::default()
            }),
            ..Hints::default()
        },
        Hints {
            domain: Some(DomainHints {
                cq_data_size: 16,
                ..DomainHints::default()
            }),
            ..Hints::default()
        },
        Hints {
            ep: Some(EpHints {
                max_msg_size: MAX_MSG_SIZE + 1,
                ..EpHints::default()
            }),
            ..Hints::default()
        },
        Hints {
            tx: Some(TxHints {
                iov_limit: 4,
                ..TxHints::default()
            }),
            ..Hints::default()
        },
    ];
    for h in &too {
        assert!(ask(V, h).is_err(), "{h:?}");
    }
    let fits = Hints {
        tx: Some(TxHints {
            inject_size: 64,
            msg_order: FI_ORDER_SAS,
            op_flags: FI_COMPLETION | FI_DELIVERY_COMPLETE,
            ..TxHints::default()
        }),
        domain: Some(DomainHints {
            cq_data_size: 4,
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    assert_eq!(
        ask(V, &fits).unwrap()[0].tx_op_flags,
        FI_COMPLETION | FI_DELIVERY_COMPLETE
    );
}

#[test]
fn memory_registration_modes_follow_the_api_version() {
    // fi_pingpong offers FI_MR_LOCAL with the basic map; nothing is
    // required, so the answer is 0.
    let h = Hints {
        domain: Some(DomainHints {
            mr_mode: FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    assert_eq!(ask(V, &h).unwrap()[0].mr_mode, 0);
    // Below 1.5 the modes are an enum: unspecified is answered scalable.
    let old = fi_version(1, 4);
    assert_eq!(
        ask(old, &Hints::default()).unwrap()[0].mr_mode,
        FI_MR_SCALABLE
    );
    let basic = Hints {
        domain: Some(DomainHints {
            mr_mode: FI_MR_BASIC,
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    assert_eq!(ask(old, &basic).unwrap()[0].mr_mode, FI_MR_BASIC);
}

#[test]
fn mem_tag_format_wider_than_64_bits_of_ours_is_refused_and_narrower_echoed() {
    let h = Hints {
        ep: Some(EpHints {
            mem_tag_format: 0x0000_FFFF_FFFF_FFFF,
            ..EpHints::default()
        }),
        ..Hints::default()
    };
    assert_eq!(ask(V, &h).unwrap()[0].mem_tag_format, 0x0000_FFFF_FFFF_FFFF);
}

#[test]
fn domain_name_picks_the_interface_and_an_unknown_one_gives_no_data() {
    let h = |name: &str| Hints {
        domain: Some(DomainHints {
            name: Some(name.into()),
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    let o = ask(V, &h("eth1")).unwrap();
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].ifname, "eth1");
    let e = ask(V, &h("ib0")).unwrap_err();
    assert!(e.0.contains("ib0") && e.0.contains("eth0"), "{}", e.0);
}

#[test]
fn another_providers_fabric_or_domain_pointer_is_never_taken() {
    let h = Hints {
        fabric: Some(FabricHints {
            fabric: 0x1234,
            name: None,
        }),
        ..Hints::default()
    };
    assert!(ask(V, &h).is_err());
    let named = Hints {
        fabric: Some(FabricHints {
            fabric: 0,
            name: Some("tcp".into()),
        }),
        ..Hints::default()
    };
    assert!(ask(V, &named).is_err());
}

#[test]
fn addresses_in_hints_must_be_names_and_pick_the_interface() {
    let dest = crate::addr::Name::new([2, 0, 0, 0, 0, 9], 3);
    let h = Hints {
        dest_addr: Some(dest.to_bytes().to_vec()),
        ..Hints::default()
    };
    assert_eq!(ask(V, &h).unwrap()[0].dest_addr, Some(dest));
    let bad = Hints {
        dest_addr: Some(vec![1, 2, 3]),
        ..Hints::default()
    };
    assert!(ask(V, &bad).is_err());
    let src = crate::addr::Name::new([2, 0, 0, 0, 0, 2], 0);
    let h = Hints {
        src_addr: Some(src.to_bytes().to_vec()),
        ..Hints::default()
    };
    let o = ask(V, &h).unwrap();
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].ifname, "eth1");
    let other_format = Hints {
        addr_format: 2,
        ..Hints::default()
    };
    assert!(ask(V, &other_format).is_err());
}

#[test]
fn node_and_service_name_the_source_with_fi_source_and_the_peer_without() {
    let o = host(&ifaces(), |h| {
        answer(V, Some("eth1"), Some("7"), FI_SOURCE, None, h)
    })
    .unwrap();
    assert_eq!(o.len(), 1);
    assert_eq!(
        o[0].src_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 2], 7))
    );
    let o = host(&ifaces(), |h| {
        answer(V, Some("[02:00:00:00:00:09]"), Some("5"), 0, None, h)
    })
    .unwrap();
    assert_eq!(
        o[0].dest_addr,
        Some(crate::addr::Name::new([2, 0, 0, 0, 0, 9], 5))
    );
    assert!(host(&ifaces(), |h| answer(
        V,
        Some("10.0.0.1"),
        Some("5"),
        0,
        None,
        h
    ))
    .is_err());
    assert!(host(&ifaces(), |h| answer(
        V,
        Some("eth0"),
        Some("port"),
        FI_SOURCE,
        None,
        h
    ))
    .is_err());
}

#[test]
fn no_interface_gives_no_data_with_the_reason() {
    let e = host(&[], |h| answer(V, None, None, 0, None, h)).unwrap_err();
    assert!(e.0.contains("no interface"), "{}", e.0);
}

#[test]
fn rma_comes_with_endpoint_bound_provider_keyed_registrations_or_not_at_all() {
    let with = |mr_mode: i32, caps: u64| Hints {
        caps,
        domain: Some(DomainHints {
            mr_mode,
            ..DomainHints::default()
        }),
        ..Hints::default()
    };
    // Asked for, and the application takes both modes.
    let o = ask(
        V,
        &with(
            FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_LOCAL,
            FI_RMA | FI_MSG,
        ),
    )
    .unwrap();
    assert_eq!(o[0].caps & RMA_CAPS, FI_RMA);
    assert_eq!(o[0].mr_mode, RMA_MR_MODE);
    // Asked for, but the application cannot bind registrations: no answer.
    assert!(ask(V, &with(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY, FI_RMA)).is_err());
    // Not asked for: no RMA, and no mode required.
    let o = ask(V, &with(FI_MR_ENDPOINT | FI_MR_PROV_KEY, FI_TAGGED)).unwrap();
    assert_eq!(o[0].caps & RMA_CAPS, 0);
    assert_eq!(o[0].mr_mode, 0);
    // Any capability, modes the application cannot take: offered without RMA.
    let o = ask(V, &with(FI_MR_LOCAL, 0)).unwrap();
    assert_eq!(o[0].caps & RMA_CAPS, 0);
    assert_eq!(o[0].mr_mode, 0);
    // Below API 1.5 (no FI_MR_ENDPOINT): never.
    assert!(ask(fi_version(1, 4), &with(0, FI_RMA)).is_err());
}
