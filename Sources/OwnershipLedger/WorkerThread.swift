import Foundation

/// A thread of its own that runs the jobs handed to it, one after another in order, until
/// ``stop()``. For work that must neither wait for nor hold up Dispatch's shared worker threads: a
/// 2-core machine has two, and a pipelined submit parses each batch on them while the next group is
/// decided and the last one freed (docs/benchmarks.md, "Session 40").
final class WorkerThread: @unchecked Sendable {  // `jobs` and `stopping` are guarded by `condition`
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var stopping = false

    /// Starts the thread.
    init() { Thread { [self] in run() }.start() }

    /// Runs `job` on the thread after the jobs handed over before it; after ``stop()``, never.
    func async(_ job: @escaping @Sendable () -> Void) {
        condition.withLock {
            guard !stopping else { return }
            jobs.append(job)
            condition.signal()
        }
    }

    /// Lets the thread end once the jobs handed over so far have run.
    func stop() {
        condition.withLock {
            stopping = true
            condition.signal()
        }
    }

    private func run() {
        while let job = nextJob() { job() }
    }

    private func nextJob() -> (@Sendable () -> Void)? {
        condition.withLock {
            while jobs.isEmpty && !stopping { condition.wait() }
            return jobs.isEmpty ? nil : jobs.removeFirst()
        }
    }
}
