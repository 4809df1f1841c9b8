//! BMI in a job started by a PMIx launcher (`srun --mpi=pmix`, mpirun): the job's servers
//! and clients find each other through PMIx instead of a configuration file.
//!
//! [`Bmi::initialize_in_job`] connects to the launcher's PMIx server; rank 0 chooses the
//! job's key material (`LLC_AUTH_KEY` when it has it, else 32 random bytes) and hands it
//! to every process (PMIx key `llc.bmi.key`), so servers and clients authenticate their
//! `bmi_llc` frames with one key; then each process initializes BMI (a server listening
//! where `listen` says), and all exchange the servers' addresses (`llc.bmi.addr`: a
//! server's first method's address, an empty card for a client).

use crate::error::BmiError;
use crate::runtime::InitFlags;
use crate::{Bmi, MethodKind};
use msg_layer::transport::llc::{AuthKey, AUTH_KEY_ENV};

/// The PMIx key of the job's key material.
const KEY_KEY: &str = "llc.bmi.key";
/// The PMIx key of each process's server address (empty for a client).
const ADDR_KEY: &str = "llc.bmi.addr";

/// What a process of a PMIx job learned about the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPeers {
    /// This process's rank.
    pub rank: u32,
    /// The number of processes of the job.
    pub size: u32,
    /// The job's servers: (rank, address to give [`Bmi::addr_lookup`]), in rank order.
    pub servers: Vec<(u32, String)>,
}

impl Bmi {
    /// Start BMI in a job started by a PMIx launcher: as [`Bmi::initialize`], with the
    /// job's key (unless `flags.auth_key` names one) and the servers' addresses learned
    /// through PMIx. `listen(rank, size)` says where this process listens: `Some(spec)`
    /// makes it a server (`flags.server`), `None` a client. `Ok(None)` when no PMIx
    /// launcher started this process.
    pub fn initialize_in_job(
        method_list: &str,
        listen: impl FnOnce(u32, u32) -> Option<String>,
        mut flags: InitFlags,
    ) -> Result<Option<(Bmi, JobPeers)>, BmiError> {
        let Some(pmix) = pmix_boot::Pmix::from_env()? else {
            return Ok(None);
        };
        let listen = listen(pmix.rank(), pmix.size());
        flags.server = listen.is_some();
        let material = pmix
            .from_first(KEY_KEY, || match std::env::var(AUTH_KEY_ENV) {
                Ok(m) if !m.is_empty() => Ok(m),
                _ => msg_layer::transport::llc::random_key_material()
                    .map_err(|e| BmiError::Transport(format!("drawing the job's key: {e}"))),
            })
            .map_err(|e| match e {
                pmix_boot::FromFirstError::Choose(e) => e,
                pmix_boot::FromFirstError::Pmix(e) => BmiError::Pmix(e),
            })?;
        if flags.auth_key.is_none() {
            flags.auth_key = Some(AuthKey::derive(material.as_bytes()));
        }
        let server = flags.server;
        let mut bmi = Bmi::initialize(method_list, listen.as_deref(), flags)?;
        let card = if server {
            let first = method_list.split(',').next().unwrap_or("").trim();
            let kind = if first == "bmi_tcp" {
                MethodKind::Tcp
            } else {
                MethodKind::Llc
            };
            bmi.method_limits(kind)?.local_addr.unwrap_or_default()
        } else {
            String::new()
        };
        let cards = pmix.all_gather(ADDR_KEY, &card)?;
        let peers = JobPeers {
            rank: pmix.rank(),
            size: pmix.size(),
            servers: cards
                .into_iter()
                .enumerate()
                .filter(|(_, c)| !c.is_empty())
                .map(|(r, c)| (r as u32, c))
                .collect(),
        };
        bmi.job = Some(pmix);
        Ok(Some((bmi, peers)))
    }
}
