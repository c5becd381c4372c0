//! A served run whose sandbox was lost (its Swarm node gone) goes on from its last
//! checkpoint in a new sandbox, as `rondo eval` does: the lost tool step runs again.

use std::sync::atomic::Ordering;

use crate::check::Checked;
use crate::run::{Interpreter, Outcome, RunOptions, RunState};

use super::Server;
use super::events::{Feeder, Hub};

/// Sandboxes a run may lose and still go on in a new one (as `rondo eval`).
const MAX_SANDBOX_LOSSES: usize = 3;

/// Drives the run `id` to its end. An interruption nobody asked for (no cancel, the
/// server not stopping) is a lost sandbox: the run is resumed from its checkpoint, its
/// events still published to `hub` and a cancel reaching the new interpreter.
pub(super) async fn drive_resuming(
    server: &Server,
    workflow: &Checked,
    options: &RunOptions,
    id: &str,
    interp: Interpreter<'_>,
    state: RunState,
    hub: &std::sync::Arc<Hub>,
) -> Outcome {
    let (mut interrupt, _) = interp.interrupter();
    let mut outcome = interp.drive(state).await;
    for lost in 1..=MAX_SANDBOX_LOSSES {
        let asked = interrupt.load(Ordering::SeqCst) || server.stopping.load(Ordering::SeqCst);
        if outcome.exit != "interrupted" || asked {
            break;
        }
        let (mut next, state) = match Interpreter::resume(workflow, &outcome.run_dir, options) {
            Ok(x) => x,
            Err(e) => {
                say!("run {id}: its sandbox was lost, and it cannot be resumed: {e}");
                break;
            }
        };
        say!(
            "run {id}: its sandbox was lost; resuming it from its last checkpoint in a new \
             one ({lost} of at most {MAX_SANDBOX_LOSSES})"
        );
        next.subscribe(Box::new(Feeder(hub.clone())));
        let (flag, wake) = next.interrupter();
        if let Ok(mut live) = server.live.lock()
            && let Some(run) = live.get_mut(id)
        {
            run.interrupt = flag.clone();
            run.wake = wake;
        }
        // A cancel that reached the old interpreter after its end holds for the new one.
        if interrupt.load(Ordering::SeqCst) || server.stopping.load(Ordering::SeqCst) {
            flag.store(true, Ordering::SeqCst);
        }
        interrupt = flag;
        outcome = next.drive(state).await;
    }
    outcome
}
