//! The job's bootstrap through PMIx: how a process of the stack's APIs learns its rank,
//! its job's size, its rank on its host and its peers' addresses when a PMIx launcher
//! started it (`srun --mpi=pmix`, Open MPI's mpirun or prterun, MPICH's mpiexec), the way
//! MPI libraries wire up.
//!
//! A launcher that serves PMIx puts `PMIX_NAMESPACE` and `PMIX_RANK` in its processes'
//! environment; [`Pmix::from_env`] connects to it then (`PMIx_Init`) and returns `None`
//! otherwise, so one program binary runs under a PMIx launcher and under the project's
//! own launcher (deckrun) or alone. The exchange is PMIx's: each process puts its values
//! ([`Pmix::put`], `PMIX_GLOBAL` scope) and commits them, all meet in a fence
//! ([`Pmix::fence`]), then each gets the others' values ([`Pmix::get`]);
//! [`Pmix::all_gather`] does the four steps for one card per process, and
//! [`Pmix::from_first`] hands every process one value that rank 0 chose (a job's key).
//!
//! Keys of this crate's users start with `llc.` so that they never meet an MPI library's
//! keys in the same job.
//!
//! libpmix (Debian's libpmix-dev 4.2) is bound by hand in `sys` (a handful of functions
//! and two structures, checked against the installed header by a test) and linked through
//! pkg-config.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::ffi::CString;

mod sys;

/// Set by a PMIx launcher in every process it starts: the job's namespace.
pub const ENV_NAMESPACE: &str = "PMIX_NAMESPACE";
/// Set by a PMIx launcher in every process it starts: the process's rank.
pub const ENV_RANK: &str = "PMIX_RANK";

/// Why talking to the PMIx server failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PmixError {
    /// `PMIx_Get` of a process's value failed.
    #[error("PMIx_Get of {key} of rank {rank} failed: {text} (PMIx status {status})")]
    Get {
        /// The key.
        key: String,
        /// Whose value.
        rank: u32,
        /// Its status.
        status: i32,
        /// `PMIx_Error_string` of the status.
        text: String,
    },
    /// A PMIx call returned an error status.
    #[error("{call} failed: {text} (PMIx status {status})")]
    Call {
        /// The function.
        call: &'static str,
        /// Its status.
        status: i32,
        /// `PMIx_Error_string` of the status.
        text: String,
    },
    /// A key or value that PMIx cannot carry (a NUL byte, a key too long).
    #[error("{what} {value:?} cannot go through PMIx: {why}")]
    Invalid {
        /// Key or value.
        what: &'static str,
        /// What was given.
        value: String,
        /// Why it cannot.
        why: &'static str,
    },
    /// A value of another type than the caller asked for.
    #[error("{key} of rank {rank} has PMIx type {found}, not {expected}")]
    Type {
        /// The key.
        key: String,
        /// Whose value.
        rank: u32,
        /// The type code found.
        found: u16,
        /// The type asked for.
        expected: &'static str,
    },
}

/// This process's connection to its launcher's PMIx server, open until dropped
/// (`PMIx_Finalize`).
#[derive(Debug)]
pub struct Pmix {
    namespace: String,
    rank: u32,
    size: u32,
    local_rank: u16,
}

/// Whether a PMIx launcher started this process (`PMIX_NAMESPACE` and `PMIX_RANK` set).
pub fn launched() -> bool {
    std::env::var_os(ENV_NAMESPACE).is_some() && std::env::var_os(ENV_RANK).is_some()
}

fn call<T>(name: &'static str, res: Result<T, sys::Status>) -> Result<T, PmixError> {
    res.map_err(|status| PmixError::Call {
        call: name,
        status,
        text: sys::error_string(status),
    })
}

fn get_err<T>(key: &str, rank: u32, res: Result<T, sys::Status>) -> Result<T, PmixError> {
    res.map_err(|status| PmixError::Get {
        key: key.to_string(),
        rank,
        status,
        text: sys::error_string(status),
    })
}

fn key_c(key: &str) -> Result<CString, PmixError> {
    let invalid = |why| PmixError::Invalid {
        what: "key",
        value: key.to_string(),
        why,
    };
    if key.is_empty() || key.len() > sys::PMIX_MAX_KEYLEN {
        return Err(invalid("1 to 511 bytes allowed"));
    }
    CString::new(key).map_err(|_| invalid("it holds a NUL byte"))
}

/// `PMIX_JOB_SIZE`.
const KEY_JOB_SIZE: &str = "pmix.job.size";
/// `PMIX_LOCAL_RANK`.
const KEY_LOCAL_RANK: &str = "pmix.lrank";

impl Pmix {
    /// Connects to the launcher's PMIx server when a PMIx launcher started this process
    /// ([`launched`]), and reads the job's size and this process's rank on its host;
    /// `Ok(None)` otherwise.
    pub fn from_env() -> Result<Option<Pmix>, PmixError> {
        if !launched() {
            return Ok(None);
        }
        let (namespace, rank) = call("PMIx_Init", sys::init())?;
        // From here on the drop finalizes.
        let mut pmix = Pmix {
            namespace,
            rank,
            size: 0,
            local_rank: 0,
        };
        pmix.size = pmix.get_unsigned(sys::PMIX_RANK_WILDCARD, KEY_JOB_SIZE)?;
        let local = pmix.get_unsigned(rank, KEY_LOCAL_RANK)?;
        pmix.local_rank = u16::try_from(local).map_err(|_| PmixError::Type {
            key: KEY_LOCAL_RANK.into(),
            rank,
            found: sys::PMIX_UINT32,
            expected: "a 16-bit local rank",
        })?;
        Ok(Some(pmix))
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of processes of the job (`PMIX_JOB_SIZE`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// This process's rank among the job's processes on its host (`PMIX_LOCAL_RANK`).
    pub fn local_rank(&self) -> u16 {
        self.local_rank
    }

    /// The job's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Publishes `value` under `key` to every process of the job (visible after the next
    /// [`Pmix::commit`] and [`Pmix::fence`]).
    pub fn put(&self, key: &str, value: &str) -> Result<(), PmixError> {
        let k = key_c(key)?;
        let v = CString::new(value).map_err(|_| PmixError::Invalid {
            what: "value",
            value: value.to_string(),
            why: "it holds a NUL byte",
        })?;
        call("PMIx_Put", sys::put_string(&k, &v))
    }

    /// Hands what was put to the server.
    pub fn commit(&self) -> Result<(), PmixError> {
        call("PMIx_Commit", sys::commit())
    }

    /// Waits until every process of the job reached the fence (a barrier), after which
    /// what each committed before it can be got. Bounded by the job: when a process of
    /// the job dies the launcher ends the fence with an error, or the job.
    pub fn fence(&self) -> Result<(), PmixError> {
        call("PMIx_Fence", sys::fence())
    }

    fn type_err(key: &str, rank: u32, found: u16, expected: &'static str) -> PmixError {
        PmixError::Type {
            key: key.to_string(),
            rank,
            found,
            expected,
        }
    }

    /// The string rank `rank` put under `key` (committed before the last fence).
    pub fn get(&self, rank: u32, key: &str) -> Result<String, PmixError> {
        let k = key_c(key)?;
        match get_err(key, rank, sys::get(&self.namespace, rank, &k))? {
            sys::Got::String(bytes) => String::from_utf8(bytes).map_err(|e| PmixError::Invalid {
                what: "value",
                value: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                why: "it is not UTF-8",
            }),
            sys::Got::Unsigned(_) => Err(Pmix::type_err(key, rank, sys::PMIX_UINT32, "a string")),
            sys::Got::Other(t) => Err(Pmix::type_err(key, rank, t, "a string")),
        }
    }

    fn get_unsigned(&self, rank: u32, key: &str) -> Result<u32, PmixError> {
        let k = key_c(key)?;
        match get_err(key, rank, sys::get(&self.namespace, rank, &k))? {
            sys::Got::Unsigned(n) => Ok(n),
            sys::Got::String(_) => Err(Pmix::type_err(
                key,
                rank,
                sys::PMIX_STRING,
                "an unsigned integer",
            )),
            sys::Got::Other(t) => Err(Pmix::type_err(key, rank, t, "an unsigned integer")),
        }
    }

    /// One all-gather: puts `card` under `key`, commits, fences, and returns every
    /// process's card, index = rank (this process's own included).
    pub fn all_gather(&self, key: &str, card: &str) -> Result<Vec<String>, PmixError> {
        self.put(key, card)?;
        self.commit()?;
        self.fence()?;
        (0..self.size)
            .map(|r| {
                if r == self.rank {
                    Ok(card.to_string())
                } else {
                    self.get(r, key)
                }
            })
            .collect()
    }

    /// A value rank 0 chooses (`choose`, called on rank 0 only) handed to every process
    /// under `key`: put, commit, fence, get from rank 0.
    pub fn from_first<E>(
        &self,
        key: &str,
        choose: impl FnOnce() -> Result<String, E>,
    ) -> Result<String, FromFirstError<E>> {
        if self.rank == 0 {
            let value = choose().map_err(FromFirstError::Choose)?;
            self.put(key, &value)?;
            self.commit()?;
            self.fence()?;
            Ok(value)
        } else {
            self.commit()?;
            self.fence()?;
            Ok(self.get(0, key)?)
        }
    }

    /// Asks the launcher to end the whole job with `status`, saying `msg` (`PMIx_Abort`).
    pub fn abort(&self, status: i32, msg: &str) -> Result<(), PmixError> {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        call("PMIx_Abort", sys::abort(status, &m))
    }
}

/// Why [`Pmix::from_first`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FromFirstError<E> {
    /// Rank 0 could not choose the value.
    #[error("choosing the value: {0}")]
    Choose(E),
    /// PMIx failed.
    #[error(transparent)]
    Pmix(#[from] PmixError),
}

impl Drop for Pmix {
    fn drop(&mut self) {
        sys::finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_pmix_cannot_carry_are_refused() {
        assert!(key_c("llc.deck.card").is_ok());
        assert!(matches!(key_c(""), Err(PmixError::Invalid { .. })));
        assert!(matches!(key_c("a\0b"), Err(PmixError::Invalid { .. })));
        assert!(matches!(
            key_c(&"k".repeat(512)),
            Err(PmixError::Invalid { .. })
        ));
        assert!(key_c(&"k".repeat(511)).is_ok());
    }
}
