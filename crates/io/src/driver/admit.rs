//! Requests into the engine: one try (refused, busy, or in flight), the
//! wait while the engine is busy, and a `DriverBatch`'s hold on the
//! engine's open batch (its writes admitted one by one, pumped together).

use super::*;

/// Why one try to admit a request failed, with its entry back.
pub(super) enum Admit {
    /// Refused for good (shut down, bad request).
    Refused(RequestError, InFlight),
    /// No room now: wait for a change and try again.
    Busy(InFlight),
}

impl Shared {
    /// Hands `request` to the engine, waiting while it is busy, and returns
    /// the commands that follow; on refusal, the error and `entry` back.
    pub(super) fn admit(
        &self,
        request: Request,
        entry: InFlight,
    ) -> Result<VecDeque<Job>, Box<(RequestError, InFlight)>> {
        let mut jobs = VecDeque::new();
        let mut core = self.lock_core();
        let mut entry = entry;
        loop {
            match self.admit_once(&mut core, request, entry) {
                Ok(()) => break,
                Err(Admit::Refused(e, back)) => return Err(Box::new((e, back))),
                Err(Admit::Busy(back)) => {
                    entry = back;
                    core.changed_waiters += 1;
                    core = self.changed.wait(core).unwrap_or_else(|p| p.into_inner());
                    core.changed_waiters -= 1;
                }
            }
        }
        self.pump(&mut core, &mut jobs);
        Ok(jobs)
    }

    /// `admit` without waiting, the engine's open batch held (from the
    /// first of a `DriverBatch`'s writes, `take_hold`, to `pump_held` at
    /// its end), so that the batch's writes share one log batch.
    pub(super) fn admit_held(
        &self,
        request: Request,
        entry: InFlight,
        take_hold: bool,
    ) -> Result<VecDeque<Job>, Admit> {
        let mut core = self.lock_core();
        if take_hold {
            core.engine.hold_batch();
        }
        self.admit_once(&mut core, request, entry)?;
        // What the engine issues now goes now: a held batch large enough
        // to go (`Engine::hold_batch`), destages.
        let mut jobs = VecDeque::new();
        self.pump(&mut core, &mut jobs);
        Ok(jobs)
    }

    /// One try: the request in flight with the engine, or why not.
    fn admit_once(
        &self,
        core: &mut MutexGuard<'_, Core>,
        request: Request,
        entry: InFlight,
    ) -> Result<(), Admit> {
        let writes = matches!(
            request.kind,
            RequestKind::Write | RequestKind::WriteZeroes | RequestKind::Trim
        );
        let refused = match core.refusing {
            Refusing::Nothing => false,
            Refusing::Writes => writes,
            Refusing::Everything => true,
        };
        if core.stopping || refused {
            return Err(Admit::Refused(RequestError::ShutDown, entry));
        }
        core.in_flight.insert(request.id.0, entry);
        let now = self.now();
        let result = core.engine.handle_request(now, request);
        let back = |core: &mut MutexGuard<'_, Core>| {
            let Some(back) = core.in_flight.remove(&request.id.0) else {
                unreachable!("the entry was just inserted");
            };
            back
        };
        match result {
            Ok(()) => Ok(()),
            Err(SubmitError::Busy(_)) => Err(Admit::Busy(back(core))),
            Err(err) => Err(Admit::Refused(err.into(), back(core))),
        }
    }

    /// Releases a `DriverBatch`'s hold (`admit_held`) and starts the
    /// commands that follow.
    pub(super) fn pump_held(&self) {
        let mut jobs = VecDeque::new();
        let mut core = self.lock_core();
        let now = self.now();
        core.engine.release_batch(now);
        self.pump(&mut core, &mut jobs);
        drop(core);
        self.dispatch_async(jobs);
        self.run_answered();
    }
}
