//! One operation's key as the checker sees it: its attempts, the jumps that caught it,
//! its stored row and business rows, and the lives it had.

use std::collections::BTreeSet;
use std::time::Duration;

use super::database::{Effects, KeyRow};
use crate::faults::Caught;
use crate::workload::{Attempt, Form, Op};

/// Everything known about one operation's key.
pub(super) struct Key<'a> {
    pub(super) op: &'a Op,
    pub(super) name: String,
    pub(super) attempts: &'a [&'a Attempt],
    /// When each jump caught the key, and how.
    pub(super) catches: &'a [(Duration, &'a Caught)],
    pub(super) stored: Option<&'a KeyRow>,
    pub(super) effects: &'a Effects<'a>,
}

impl Key<'_> {
    /// The lives of the key: a phased key's generation, a single-transaction key's
    /// creation time (idem gave single-transaction rows generation 0 until it sealed
    /// stored responses to the generation, and such rows may still be around).
    pub(super) fn life(&self, generation: i64, created_at: i64) -> i64 {
        match self.op.form {
            Form::Order => created_at,
            Form::Payment => generation,
        }
    }

    pub(super) fn lives(&self) -> BTreeSet<i64> {
        let mut lives: BTreeSet<i64> = self
            .catches
            .iter()
            .map(|(_, c)| self.life(c.generation, c.created_at))
            .collect();
        if let Some((.., generation, created_at)) = self.stored {
            lives.insert(self.life(*generation, *created_at));
        }
        lives
    }

    pub(super) fn final_life(&self) -> Option<i64> {
        self.stored
            .map(|(.., generation, created_at)| self.life(*generation, *created_at))
    }

    /// The jumps that caught the key, for a violation's message.
    pub(super) fn history(&self) -> String {
        let caught: Vec<String> = self
            .catches
            .iter()
            .map(|(at, c)| {
                format!(
                    "{} at {:.1} s (generation {}{})",
                    if c.completed {
                        "completed"
                    } else {
                        "in progress"
                    },
                    at.as_secs_f64(),
                    c.generation,
                    if c.lease_ended { ", lease ended" } else { "" }
                )
            })
            .collect();
        match self.stored {
            Some((_, _, state, .., generation, _)) => format!(
                "caught {}; now {state}, generation {generation}",
                caught.join(", ")
            ),
            None => format!("caught {}; now gone", caught.join(", ")),
        }
    }
}
