//! Where the last panic on this thread happened: `catch_unwind` hands over
//! only the payload, and an excused run tells openraft's own assertions
//! (which assume Raft's model) from a panic in the store or the harness by
//! the file it fired in.

use std::cell::RefCell;
use std::panic;
use std::sync::Once;

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records each panic's file and line from now on (the hook is installed
/// once per process and keeps the previous one's output), and forgets the
/// last one recorded on this thread.
pub fn record() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let site = info
                .location()
                .map(|location| format!("{}:{}", location.file(), location.line()));
            LAST.with(|last| *last.borrow_mut() = site);
            previous(info);
        }));
    });
    LAST.with(|last| last.borrow_mut().take());
}

/// The file and line of the last panic on this thread since `record`.
pub fn last() -> Option<String> {
    LAST.with(|last| last.borrow().clone())
}

/// Whether `site` is in openraft's source (a registry or vendored copy).
pub fn is_openraft(site: &str) -> bool {
    site.split(['/', '\\'])
        .any(|part| part.starts_with("openraft-0."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_placed_by_its_file() {
        record();
        let caught = panic::catch_unwind(|| panic!("planted"));
        assert!(caught.is_err());
        let site = last().expect("a site");
        assert!(site.contains("panic_site.rs"), "{site}");
        assert!(!is_openraft(&site));
        assert!(is_openraft(
            "/root/.cargo/registry/src/index/openraft-0.9.25/src/core/raft_core.rs:761"
        ));
    }
}
