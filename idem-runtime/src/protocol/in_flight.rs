//! Keys held by this process's open transactions, for a database with one writer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::ClaimRequest;

/// Keys held by requests of this process whose transaction is open, for a backend that
/// lets one writer in at a time: there a request that waited in vain for the write lock
/// cannot see, in the database, whether the holder has its key (the holder's row is not
/// committed), but it can ask here. Counts, not a set, as a retry may claim a key before
/// the request that rolled it back has dropped its guard.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashMap<(String, String), usize>>);

impl InFlight {
    pub(crate) fn hold(self: &Arc<Self>, claim: &ClaimRequest<'_>) -> Held {
        let id = (claim.scope.to_owned(), claim.key.to_owned());
        *self.lock().entry(id.clone()).or_default() += 1;
        Held {
            in_flight: Arc::clone(self),
            id,
        }
    }

    pub(crate) fn holds(&self, claim: &ClaimRequest<'_>) -> bool {
        self.lock()
            .contains_key(&(claim.scope.to_owned(), claim.key.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), usize>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A key announced in [`InFlight`] until dropped.
#[derive(Debug)]
pub(crate) struct Held {
    in_flight: Arc<InFlight>,
    id: (String, String),
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.in_flight.lock();
        if let Some(count) = held.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.id);
            }
        }
    }
}
