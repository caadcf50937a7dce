import Foundation
import Testing

@testable import OwnershipLedger

/// What a commit leaves behind is freed off the writer's thread, and no more than `inFlight`
/// values ever wait to be freed.
@Suite struct DisposalTests {
    /// Reports the thread its deinit runs on; the deinit may wait for `gate` first.
    final class Tracked: @unchecked Sendable {
        let gate: DispatchSemaphore?
        let onFreed: @Sendable (pthread_t) -> Void

        init(gate: DispatchSemaphore? = nil, onFreed: @escaping @Sendable (pthread_t) -> Void) {
            self.gate = gate
            self.onFreed = onFreed
        }

        deinit {
            gate?.wait()
            onFreed(pthread_self())
        }
    }

    final class Threads: @unchecked Sendable {
        private let lock = NSLock()
        private var freedOn: [pthread_t] = []
        let freed = DispatchSemaphore(value: 0)
        func note(_ thread: pthread_t) {
            lock.withLock { freedOn.append(thread) }
            freed.signal()
        }
        var all: [pthread_t] { lock.withLock { freedOn } }
    }

    @Test func aReleasedValueIsFreedOnAnotherThread() throws {
        let disposal = Disposal(inFlight: 2)
        let threads = Threads()
        let caller = pthread_self()
        for _ in 0..<10 { disposal.release(Tracked(onFreed: threads.note)) }
        for _ in 0..<10 { #expect(threads.freed.wait(timeout: .now() + 30) == .success) }
        #expect(threads.all.count == 10)
        #expect(threads.all.allSatisfy { pthread_equal($0, caller) == 0 }, "a value was freed on the thread that released it")
    }

    @Test func aReleaseWaitsWhileTheMostValuesAreWaitingToBeFreed() throws {
        let disposal = Disposal(inFlight: 3)
        let gate = DispatchSemaphore(value: 0)
        let threads = Threads()
        // Every value's deinit waits for the gate, so every slot stays taken: the releases past
        // `inFlight` must wait (on their own thread, so that a release freeing in place cannot
        // hold up the test).
        let returned = DispatchSemaphore(value: 0)
        Thread {
            for _ in 0...disposal.inFlight {
                disposal.release(Tracked(gate: gate, onFreed: threads.note))
                returned.signal()
            }
        }.start()
        for _ in 0..<disposal.inFlight { #expect(returned.wait(timeout: .now() + 30) == .success) }
        #expect(returned.wait(timeout: .now() + 0.3) == .timedOut, "a release past the limit returned while every slot was taken")
        #expect(threads.all.isEmpty)
        for _ in 0...disposal.inFlight { gate.signal() }
        #expect(returned.wait(timeout: .now() + 30) == .success)
        for _ in 0...disposal.inFlight { #expect(threads.freed.wait(timeout: .now() + 30) == .success) }
        #expect(threads.all.count == disposal.inFlight + 1)
    }
}

/// The thread that frees for `Disposal` and decides ahead for `GroupCommitter`.
@Suite struct WorkerThreadTests {
    final class Log: @unchecked Sendable {
        private let lock = NSLock()
        private var entries: [(job: Int, thread: pthread_t)] = []
        let ran = DispatchSemaphore(value: 0)
        func note(_ job: Int) {
            lock.withLock { entries.append((job, pthread_self())) }
            ran.signal()
        }
        var all: [(job: Int, thread: pthread_t)] { lock.withLock { entries } }
    }

    @Test func jobsRunInOrderOnOneThreadOfTheirOwn() throws {
        let worker = WorkerThread()
        let log = Log()
        let caller = pthread_self()
        for job in 0..<50 { worker.async { log.note(job) } }
        // Handed over before the stop: they still run, in order.
        worker.stop()
        for _ in 0..<50 { #expect(log.ran.wait(timeout: .now() + 30) == .success) }
        let all = log.all
        #expect(all.map(\.job) == Array(0..<50))
        #expect(all.allSatisfy { pthread_equal($0.thread, all[0].thread) != 0 }, "the jobs ran on more than one thread")
        #expect(pthread_equal(all[0].thread, caller) == 0)
        // Nothing runs after the stop.
        worker.async { log.note(50) }
        #expect(log.ran.wait(timeout: .now() + 0.3) == .timedOut, "a job ran after the worker stopped")
    }
}
