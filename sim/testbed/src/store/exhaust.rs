//! Every crash state of a store's short workloads: the explorer
//! ([`crate::explore`]) on the same runner as the seeded campaigns, over
//! workloads spelled in letters of an alphabet of operations.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use durlog_vfs::{FaultConfig, SimVfs};

use super::{Model, Open, Step, Store, StoreOptions, StorePlan, run, short};
use crate::explore::{Exhaustible, LossFacts, PowerLossHook};
use crate::scenario::Violation;

/// A workload: operations of the alphabet by letter (`a` is the first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Letters(pub Vec<u8>);

impl fmt::Display for Letters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0
            .iter()
            .try_for_each(|&letter| write!(f, "{}", char::from(b'a' + letter)))
    }
}

impl FromStr for Letters {
    type Err = String;

    fn from_str(text: &str) -> Result<Letters, String> {
        let letter = |c: char| match c {
            'a'..='z' => Ok(c as u8 - b'a'),
            _ => Err(format!("{text:?}: a workload is letters a to z")),
        };
        text.chars()
            .map(letter)
            .collect::<Result<_, _>>()
            .map(Letters)
    }
}

/// A store's workloads over an alphabet of operations.
pub(crate) struct StoreWorkloads<S: Store> {
    pub open: Arc<Open<S>>,
    pub command: String,
    pub alphabet: Vec<<S::Model as Model>::Op>,
    pub options: StoreOptions,
}

impl<S: Store> StoreWorkloads<S> {
    fn plan(&self, workload: &Letters) -> StorePlan<<S::Model as Model>::Op> {
        let steps = (workload.0.iter())
            .map(|&letter| Step::Apply {
                op: self.alphabet[usize::from(letter)].clone(),
                power_loss: None,
            })
            .collect();
        StorePlan {
            disk_seed: 0,
            faults: FaultConfig::none(),
            steps,
        }
    }
}

impl<S: Store> Exhaustible for StoreWorkloads<S> {
    type Workload = Letters;
    type Options = StoreOptions;

    fn command(&self) -> &str {
        &self.command
    }

    fn options(&self) -> &StoreOptions {
        &self.options
    }

    fn workloads(&self, ops: u32) -> Vec<Letters> {
        let letters = self.alphabet.len() as u8;
        let (mut level, mut all) = (vec![Vec::new()], Vec::new());
        for _ in 0..ops {
            level = (level.iter())
                .flat_map(|ops: &Vec<u8>| {
                    (0..letters).map(move |letter| [ops.as_slice(), &[letter]].concat())
                })
                .collect();
            all.extend(level.iter().cloned().map(Letters));
        }
        all
    }

    fn run_workload(
        &self,
        workload: &Letters,
        disk: SimVfs,
        trace: bool,
        on_power_loss: Option<PowerLossHook<'_>>,
    ) -> (Option<Violation>, Vec<String>) {
        let plan = self.plan(workload);
        // Without a hook (a replay) the runner must still crash at the end,
        // where the explorer's power loss struck: a hook that lets every
        // power loss through does that.
        let hook = on_power_loss.unwrap_or_else(|| Box::new(|_: &SimVfs, _: LossFacts| true));
        let outcome = run::run_plan(&*self.open, disk, &plan, None, trace, Some(hook));
        (outcome.violation, outcome.trace)
    }

    fn describe_step(&self, workload: &Letters, step: usize) -> String {
        match workload.0.get(step) {
            Some(&letter) => {
                let op = format!("{:?}", self.alphabet[usize::from(letter)]);
                format!("operation {} ({})", step + 1, short(&op))
            }
            None => "reading back after the power loss".to_string(),
        }
    }

    fn describe(&self, ops: u32) -> String {
        let letters: Vec<String> = (self.alphabet.iter().enumerate())
            .map(|(index, op)| {
                let op = short(&format!("{op:?}"));
                format!("{} = {op}", char::from(b'a' + index as u8))
            })
            .collect();
        format!(
            "exhaust --ops {ops}: every workload of 1 to {ops} operations of {}, then a power loss",
            letters.join(", ")
        )
    }
}
