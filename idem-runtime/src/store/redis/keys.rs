//! The Redis names of one idem key: one hash tag, `{scope:key}`, for all of them.

/// The keys a script touches for one idem key.
#[derive(Debug, Clone)]
pub(super) struct KeyNames {
    /// `idem:{scope:key}`, the record; every other name starts with it.
    pub(super) record: String,
    pub(super) counter: String,
    pub(super) lease: String,
    pub(super) phases: String,
}

impl KeyNames {
    pub(super) fn new(scope: &str, key: &str) -> Self {
        let mut record = String::with_capacity(scope.len() + key.len() + 8);
        record.push_str("idem:{");
        escape_into(&mut record, scope);
        record.push(':');
        escape_into(&mut record, key);
        record.push('}');
        Self {
            counter: format!("{record}:token"),
            lease: format!("{record}:lease"),
            phases: format!("{record}:phases"),
            record,
        }
    }

    /// The key of a phase's output (the scripts build the same name from the record's).
    pub(super) fn phase(&self, phase: &str) -> String {
        format!("{}:phase:{phase}", self.record)
    }
}

/// Percent-escapes what would make the tag ambiguous: `:` between scope and key (scope
/// `a:b` with key `c` is not scope `a` with key `b:c`), the braces that end a hash tag,
/// and `%` itself.
fn escape_into(out: &mut String, part: &str) {
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeyNames;

    #[test]
    fn scope_and_key_cannot_run_into_each_other() {
        assert_ne!(
            KeyNames::new("a:b", "c").record,
            KeyNames::new("a", "b:c").record
        );
        assert_eq!(KeyNames::new("a:b", "c}").record, "idem:{a%3Ab:c%7D}");
    }

    #[test]
    fn every_name_shares_the_records_tag() {
        let names = KeyNames::new("acct", "k");
        for name in [
            &names.counter,
            &names.lease,
            &names.phases,
            &names.phase("x"),
        ] {
            assert!(name.starts_with("idem:{acct:k}:"), "{name}");
        }
    }
}
