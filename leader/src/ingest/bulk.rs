//! Work too large for the runtime's threads: decoding a large batch, dropping a stream's
//! large tables. It runs on a few threads of its own at a lower scheduling priority (nice
//! [`NICE`]), so that while one agent's bulk is worked through, the runtime's threads still
//! take every other agent's small batches and send their acks at once. Within the runtime,
//! a task that held its thread for milliseconds would hold up every task queued behind it;
//! at the same priority, the operating system would share the CPU evenly between bulk and
//! the rest. A lower priority still gets the CPU the rest leaves (about a tenth of it under
//! full load), so bulk is slowed, never starved.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Batches of at least this many bytes are decoded off the runtime's threads (about half
/// a millisecond of decoding).
pub const LARGE_BATCH: usize = 64 << 10;
/// A stream whose tables hold at least this many bytes has them dropped off the runtime's
/// threads.
pub const LARGE_TABLES: usize = 4 << 20;

/// How much nicer the bulk threads are than the process's other threads.
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// The bulk threads; they end when the last handle is dropped.
#[derive(Debug)]
pub struct Bulk {
    /// `None`: no thread could be started, and work runs where it is asked for.
    jobs: Option<Mutex<mpsc::Sender<Job>>>,
}

impl Bulk {
    /// Starts `threads` bulk threads; with none (asked for or given by the system, which
    /// a warning says), work runs on the caller's thread.
    pub fn start(threads: usize) -> Arc<Bulk> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for n in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ne-bulk-{n}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        // The lock is held while waiting only: one thread takes the next job.
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        match job {
                            // A job that panics loses its answer (its caller sees `None`),
                            // not the thread.
                            Ok(job) => {
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                            Err(mpsc::RecvError) => return,
                        }
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                Err(error) => tracing::warn!(%error, "a bulk thread could not be started"),
            }
        }
        Arc::new(Bulk {
            jobs: (started > 0).then(|| Mutex::new(tx)),
        })
    }

    /// Runs `work` on a bulk thread; `None` when it panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let Some(jobs) = &self.jobs else {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).ok();
        };
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(work());
        });
        jobs.lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .ok()?;
        rx.await.ok()
    }
}

/// Makes the calling thread [`NICE`] steps nicer than it is (on Linux, `setpriority` of
/// the process id 0 changes the calling thread alone). Failing that, bulk work runs at the
/// priority of the rest, as it would elsewhere: a warning says so.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let lowered = getpriority_process(None)
            .and_then(|nice| setpriority_process(None, (nice + NICE).min(19)));
        if let Err(error) = lowered {
            tracing::warn!(%error, "a bulk thread keeps the process's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_a_bulk_thread_and_its_result_comes_back() {
        let bulk = Bulk::start(2);
        let name = bulk
            .run(|| std::thread::current().name().map(str::to_owned))
            .await;
        assert!(name.flatten().unwrap().starts_with("ne-bulk-"));
    }

    /// Linux gives each thread its own nice value: the bulk threads' is theirs alone.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn bulk_threads_run_at_a_lower_priority_than_the_rest() {
        let bulk = Bulk::start(1);
        let nice = || rustix::process::getpriority_process(None).unwrap();
        assert_eq!(bulk.run(nice).await, Some((nice() + NICE).min(19)));
    }

    #[tokio::test]
    async fn work_that_panics_gives_none_and_the_threads_go_on() {
        let bulk = Bulk::start(1);
        let panicked: Option<()> = bulk.run(|| panic!("a bad job")).await;
        assert_eq!(panicked, None);
        assert_eq!(bulk.run(|| 7).await, Some(7));
    }
}
