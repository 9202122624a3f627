//! How a plan's actions read in a replay's trace and a shrunk repro.

use std::fmt;

use super::{Action, CrashSpec};

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Submit {
                client,
                stream,
                expected,
                events,
            } => {
                write!(
                    f,
                    "submit client {client} stream s{stream} expected {expected:?} events ["
                )?;
                for (i, event) in events.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}t{}:{}B", event.event_type, event.len)?;
                    if let Some(id) = event.extras.id {
                        write!(f, " id {id}")?;
                    }
                    if event.extras.metadata_len > 0 {
                        write!(f, " meta {}B", event.extras.metadata_len)?;
                    }
                    if let Some(content_type) = event.extras.content_type {
                        write!(f, " ct{content_type}")?;
                    }
                }
                f.write_str("]")
            }
            Action::Commit { crash } => write!(f, "commit group{}", crash_suffix(*crash)),
            Action::Read {
                stream,
                from,
                limit,
            } => write!(f, "read s{stream} from {from} limit {limit}"),
            Action::Crash { recovery, bit_flip } => {
                write!(
                    f,
                    "power loss{}{}",
                    if *bit_flip {
                        ", flip a bit at rest"
                    } else {
                        ""
                    },
                    recovery_suffix(*recovery)
                )
            }
            Action::Subscribe { back, stream } => match stream {
                Some(stream) => write!(f, "subscribe {back} back to streams s{stream}*"),
                None => write!(f, "subscribe {back} back"),
            },
            Action::Poll { subscriber, max } => {
                write!(f, "poll subscriber {subscriber} for up to {max}")
            }
            Action::Purge {
                keep_percent,
                crash,
            } => write!(
                f,
                "purge keeping about {keep_percent}% of the records{}",
                crash_suffix(*crash)
            ),
            Action::Truncate { back, crash } => {
                write!(f, "truncate {back} records back{}", crash_suffix(*crash))
            }
            Action::SetMetadata { .. }
            | Action::Delete { .. }
            | Action::RecordPosition { .. }
            | Action::Retry { .. }
            | Action::SubscribeType { .. } => fmt_event_store(self, f),
            Action::SecondOpen => f.write_str("a second opener beside the writer"),
            Action::SubscribeAhead => {
                f.write_str("a subscriber 30 back to every stream takes one record")
            }
            Action::ReadFiltered {
                stream,
                event_type,
                type_prefix,
                applying_metadata,
            } => write!(
                f,
                "read_all_filtered: streams {}, types {} t{event_type}{}",
                stream.map_or_else(|| "all".to_owned(), |stream| format!("s{stream}*")),
                if *type_prefix {
                    "starting as"
                } else {
                    "exactly"
                },
                if *applying_metadata {
                    ", metadata applied"
                } else {
                    ""
                }
            ),
            Action::Reopen { quota, recovery } => write!(
                f,
                "restart process, quota {quota:?}{}",
                recovery_suffix(*recovery)
            ),
        }
    }
}

/// The event-store actions (`insert_event_store`).
fn fmt_event_store(action: &Action, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match action {
        Action::SetMetadata {
            stream,
            max_count,
            truncate_back,
            max_age_ticks,
            crash,
        } => write!(
            f,
            "set metadata of s{stream}: max count {max_count:?}, truncate {truncate_back:?} back, max age {max_age_ticks:?} ticks{}",
            crash_suffix(*crash)
        ),
        Action::Delete {
            stream,
            hard,
            crash,
        } => write!(
            f,
            "delete s{stream} {}{}",
            if *hard { "hard" } else { "soft" },
            crash_suffix(*crash)
        ),
        Action::RecordPosition {
            consumer,
            back,
            crash,
        } => write!(
            f,
            "consumer c{consumer} records the seq {back} back{}",
            crash_suffix(*crash)
        ),
        Action::Retry { altered } => write!(
            f,
            "retry the appends in doubt idempotently, or the last one{}",
            if *altered { " altered" } else { "" }
        ),
        Action::SubscribeType { back, event_type } => {
            write!(f, "subscribe {back} back to events of type {event_type}")
        }
        other => unreachable!("{other:?} is not an event-store action"),
    }
}

fn crash_suffix(crash: CrashSpec) -> String {
    match crash {
        CrashSpec::None => String::new(),
        CrashSpec::AfterOps(n) => format!(", power loss during disk op {n}"),
        CrashSpec::Failpoint => ", power loss at the failpoint after write".into(),
    }
}

fn recovery_suffix(crash: CrashSpec) -> String {
    match crash {
        CrashSpec::AfterOps(n) => format!(", then power loss during recovery op {n}"),
        _ => String::new(),
    }
}
