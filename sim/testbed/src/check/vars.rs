//! The variables a check reads (`DURLOG_TESTBED_*`): from the
//! environment, or from the words of a replay line ([`super::Check::try_replay`]).

use std::ops::Range;

/// The variables a check reads: the environment's, or those a replay
/// line sets.
pub(super) struct Vars(Option<Vec<(String, String)>>);

impl Vars {
    pub(super) fn env() -> Vars {
        Vars(None)
    }

    pub(super) fn words(words: &[String]) -> Vars {
        let pairs = (words.iter())
            .filter_map(|word| word.split_once('='))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Vars(Some(pairs))
    }

    pub(super) fn get(&self, name: &str) -> Option<String> {
        match &self.0 {
            None => std::env::var(name).ok(),
            Some(pairs) => (pairs.iter())
                .find(|(known, _)| known == name)
                .map(|(_, value)| value.clone()),
        }
    }

    pub(super) fn u64(&self, name: &str) -> Option<u64> {
        let text = self.get(name)?;
        Some(
            text.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}={text}: not a seed")),
        )
    }

    pub(super) fn range(&self, name: &str) -> Option<Range<u64>> {
        let text = self.get(name)?;
        let parse = |part: &str| {
            part.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}={text}: not a range A..B"))
        };
        let (start, end) = text
            .split_once("..")
            .unwrap_or_else(|| panic!("{name}={text}: not a range A..B"));
        Some(parse(start)..parse(end))
    }
}
