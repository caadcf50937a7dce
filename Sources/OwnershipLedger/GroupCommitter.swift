import Foundation
public import LedgerCore

/// One writer for many producers: a bounded queue of pending requests and one thread that takes
/// everything pending, decides it as one group through ``Ledger/submit(isolating:)`` (one write
/// transaction, one `fsync`), and only then completes each request. A completion therefore means
/// the decision is durable. When the queue is full a request is refused at once
/// (``Refusal/full``), never queued without bound.
///
/// Any number of threads may ``enqueue(_:at:completion:)``; a process should have one committer per
/// store (LMDB serialises writers, so a second one would only wait).
public final class GroupCommitter: @unchecked Sendable {
    /// Why a request was not queued.
    public enum Refusal: Error, Equatable, Sendable {
        /// The queue holds ``GroupCommitter/capacity`` submissions: retry later.
        case full
        /// ``GroupCommitter/close()`` was called.
        case closed
    }

    /// One commit, as the writer reports it.
    public struct Commit: Sendable {
        /// Submissions decided in the commit.
        public var submissions: Int
        /// Requests (``enqueue(_:at:completion:)`` calls) completed by it.
        public var requests: Int
        /// From taking the group to the durable commit.
        public var seconds: Double
    }

    public typealias Completion = @Sendable (Result<[Decision], any Error>) -> Void

    /// The most submissions queued at once.
    public let capacity: Int
    /// The most submissions decided in one commit (a larger single request is still taken whole).
    public let maximumGroup: Int
    private let ledger: Ledger
    private let onCommit: (@Sendable (Commit) -> Void)?
    private let condition = NSCondition()
    private var pending: [(submissions: [Ledger.Submission], at: Timestamp, completion: Completion)] = []
    private var depth = 0
    private var closed = false
    private let finished = DispatchSemaphore(value: 0)

    /// Starts the writer thread. `onCommit` runs on it after each commit (keep it short).
    public init(ledger: Ledger, capacity: Int = 8_192, maximumGroup: Int = 2_000, onCommit: (@Sendable (Commit) -> Void)? = nil) {
        self.ledger = ledger
        self.capacity = max(1, capacity)
        self.maximumGroup = max(1, maximumGroup)
        self.onCommit = onCommit
        let writer = Thread { [self] in run() }
        writer.name = "ledger-writer"
        writer.start()
    }

    /// Submissions queued and not yet taken by the writer.
    public var queueDepth: Int { condition.withLock { depth } }

    /// Queues `submissions`, to be decided in order as one group at `at`. `completion` runs on the
    /// writer thread once their commit is durable, or with the error that kept them from being
    /// decided (nothing of them was written); keep it short.
    /// - Throws: ``Refusal/full`` when the queue has no room (an empty queue takes any request),
    ///   ``Refusal/closed`` after ``close()``.
    public func enqueue(_ submissions: [Ledger.Submission], at: Timestamp, completion: @escaping Completion) throws(Refusal) {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { throw .closed }
        guard depth == 0 || depth + submissions.count <= capacity else { throw .full }
        pending.append((submissions, at, completion))
        depth += submissions.count
        condition.signal()
    }

    /// Refuses new requests, decides and completes everything queued, then stops the writer.
    /// Returns once the last commit is durable. Idempotent.
    public func close() {
        condition.withLock {
            closed = true
            condition.signal()
        }
        finished.wait()
        finished.signal()  // for the next caller
    }

    private func run() {
        while let group = nextGroup() {
            let started = DispatchTime.now()
            let results = ledger.submit(isolating: group.map { ($0.submissions, $0.at) })
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
            onCommit?(Commit(submissions: group.reduce(0) { $0 + $1.submissions.count }, requests: group.count, seconds: seconds))
            for (request, result) in zip(group, results) { request.completion(result) }
        }
        finished.signal()
    }

    /// Waits for work and takes what is pending, up to ``maximumGroup`` submissions; nil once
    /// closed and drained.
    private func nextGroup() -> [(submissions: [Ledger.Submission], at: Timestamp, completion: Completion)]? {
        condition.lock()
        defer { condition.unlock() }
        while pending.isEmpty && !closed { condition.wait() }
        guard !pending.isEmpty else { return nil }
        var count = 0
        var taken = 0
        while taken < pending.count && (taken == 0 || count + pending[taken].submissions.count <= maximumGroup) {
            count += pending[taken].submissions.count
            taken += 1
        }
        let group = Array(pending.prefix(taken))
        pending.removeFirst(taken)
        depth -= count
        return group
    }
}

extension Ledger {
    /// Decides every group in one commit, like ``submit(groups:)``; when that commit fails,
    /// decides each group alone, so one group's failure stays its own. Each result is a group's
    /// decisions or the error that kept it from being decided (nothing of it was written).
    public func submit(isolating groups: [(submissions: [Submission], at: Timestamp)]) -> [Result<[Decision], any Error>] {
        guard !groups.isEmpty else { return [] }
        do {
            return try submit(groups: groups).map { .success($0) }
        } catch {
            guard groups.count > 1 else { return [.failure(error)] }
            return groups.map { group in Result { try submit(group.submissions, at: group.at) } }
        }
    }
}
