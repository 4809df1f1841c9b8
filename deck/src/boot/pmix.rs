//! The bootstrap under a PMIx launcher (`srun --mpi=pmix`, mpirun, prterun, mpiexec):
//! the same facts deckrun's boot gives a node, from the launcher's PMIx server instead.
//!
//! | deckrun's boot | under PMIx |
//! |---|---|
//! | `DECK_NODE`, `DECK_NUMNODES` | the PMIx rank and the job's size |
//! | `DECK_LOCAL_RANK` | `PMIX_LOCAL_RANK` |
//! | `DECK_TRANSPORT` | `DECK_TRANSPORT` (the same spec, from the job's environment) |
//! | KEY from deckrun | rank 0's choice (`LLC_AUTH_KEY` when rank 0 has it, else 32 random bytes), handed out through PMIx (key `llc.deck.key`) |
//! | an all-gather round of cards | put, commit, fence, get of `llc.deck.card.ROUND` |
//! | the watchdog (the node ends with deckrun) | the launcher's own: it kills the job's processes |
//!
//! A TCP spec with an unspecified address (`tcp://0.0.0.0:0`) is refused here: deckrun
//! replaces it with the address the launcher is reached from, and PMIx has no such
//! address; name the interface's address (or use LLC).

use msg_layer::transport::spec::KeySource;
use msg_layer::transport::TransportSpec;
use pmix_boot::Pmix;

use super::{parse_transport, BootError, KeyMaterial, ENV_TRANSPORT, MAX_KEY};

/// The PMIx key of the job's key material (rank 0 puts it).
const KEY_KEY: &str = "llc.deck.key";
/// The PMIx key of round `r`'s cards: `llc.deck.card.R`.
const CARD_KEY: &str = "llc.deck.card";

/// A node's connection to its PMIx launcher, for the length of the job.
#[derive(Debug)]
pub struct PmixJob {
    pmix: Pmix,
    transport: TransportSpec,
    key: Option<KeyMaterial>,
    round: u32,
}

impl PmixJob {
    /// Connects to the launcher's PMIx server when a PMIx launcher started this process
    /// (`PMIX_NAMESPACE` and `PMIX_RANK` set), reads `DECK_TRANSPORT`, and, for an LLC
    /// transport that authenticates, gets the job's key material from rank 0 (a fence
    /// of the whole job). `Ok(None)` when no PMIx launcher started the process.
    pub fn from_env() -> Result<Option<PmixJob>, BootError> {
        let Some(pmix) = Pmix::from_env()? else {
            return Ok(None);
        };
        let spec = std::env::var(ENV_TRANSPORT).ok();
        let transport = parse_transport(spec)?;
        if let TransportSpec::Tcp(t) | TransportSpec::TcpUring(t) = &transport {
            if t.addr.ip().is_unspecified() {
                return Err(BootError::EnvInvalid {
                    var: ENV_TRANSPORT,
                    value: transport.to_string(),
                    expected: "under a PMIx launcher, a TCP spec with this host's address \
                               (or an llc:// spec): there is no launcher connection to take \
                               the address from"
                        .into(),
                });
            }
        }
        let keyed = matches!(&transport, TransportSpec::Llc(l) if l.auth != KeySource::Off);
        let key = if keyed {
            let material = pmix.from_first(KEY_KEY, choose_key).map_err(|e| match e {
                pmix_boot::FromFirstError::Choose(e) => e,
                pmix_boot::FromFirstError::Pmix(e) => BootError::Pmix(e),
            })?;
            Some(KeyMaterial::new(material).ok_or(BootError::EnvInvalid {
                var: msg_layer::transport::llc::AUTH_KEY_ENV,
                value: "(hidden)".into(),
                expected: format!("1 to {MAX_KEY} bytes of key material on rank 0"),
            })?)
        } else {
            None
        };
        tracing::debug!(
            rank = pmix.rank(),
            size = pmix.size(),
            namespace = pmix.namespace(),
            "deck boot: PMIx"
        );
        Ok(Some(PmixJob {
            pmix,
            transport,
            key,
            round: 0,
        }))
    }

    /// This node: the PMIx rank.
    pub fn node(&self) -> u32 {
        self.pmix.rank()
    }

    /// The number of nodes: the job's size.
    pub fn numnodes(&self) -> u32 {
        self.pmix.size()
    }

    /// The node's rank among the job's processes on its host.
    pub fn local_rank(&self) -> u32 {
        u32::from(self.pmix.local_rank())
    }

    /// The transport spec of `DECK_TRANSPORT` (port 0 unless it names one, as under
    /// deckrun).
    pub fn transport(&self) -> &TransportSpec {
        &self.transport
    }

    /// The job's key material, when the transport authenticates.
    pub fn key_material(&self) -> Option<&KeyMaterial> {
        self.key.as_ref()
    }

    /// The connection to the PMIx server, to keep open for as long as the process runs.
    pub fn into_pmix(self) -> Pmix {
        self.pmix
    }

    /// One all-gather round: every node's card, index = node.
    pub fn exchange(&mut self, card: &str) -> Result<Vec<String>, BootError> {
        super::node::check_card(card)?;
        let key = format!("{CARD_KEY}.{}", self.round);
        let cards = self.pmix.all_gather(&key, card)?;
        self.round += 1;
        Ok(cards)
    }
}

/// Rank 0's key material: `LLC_AUTH_KEY` when it has it, else 32 random bytes in hex.
fn choose_key() -> Result<String, BootError> {
    let var = msg_layer::transport::llc::AUTH_KEY_ENV;
    match std::env::var(var) {
        Ok(m) => Ok(m),
        Err(std::env::VarError::NotUnicode(_)) => Err(BootError::EnvInvalid {
            var,
            value: "(hidden)".into(),
            expected: "key material as UTF-8 text".into(),
        }),
        Err(std::env::VarError::NotPresent) => {
            msg_layer::transport::llc::random_key_material().map_err(BootError::Key)
        }
    }
}
