import Foundation
public import LedgerCore
import LedgerStore

/// One writer for many producers: a bounded queue of pending requests and one thread that takes
/// everything pending, decides it together through ``Ledger/submit(isolating:)`` (one write
/// transaction, one `fsync`), and only then completes each request. A completion therefore means
/// the decision is durable. When the queue is full a request is refused at once
/// (``Refusal/full``), or its producer waits for room (``enqueue(_:waitingForRoom:completion:)``):
/// never queued without bound.
///
/// A request is a list of groups (e.g. the lines of one batch), each decided in order at its own
/// time. Any number of threads may ``enqueue(_:waitingForRoom:completion:)``; a process should have one committer per
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
        /// Requests (``enqueue(_:waitingForRoom:completion:)`` calls) completed by it.
        public var requests: Int
        /// From taking the group to the durable commit.
        public var seconds: Double
        /// Whether the group was decided while the commit before it synced, and written as decided
        /// (``GroupCommitter/readingAhead``).
        public var decidedAhead: Bool = false
    }

    /// A request's groups.
    public typealias Groups = [(submissions: [Ledger.Submission], at: Timestamp)]
    /// What became of each group of a request, in order: its decisions, or the error that kept it
    /// from being decided (nothing of it was written).
    public typealias Completion = @Sendable ([Result<[Decision], any Error>]) -> Void

    /// The most submissions queued at once.
    public let capacity: Int
    /// The most submissions decided in one commit (a larger single request is still taken whole).
    public let maximumGroup: Int
    /// How long the writer, woken by a request while others are arriving (its last commit completed
    /// more than one request), waits for more before it commits (0: never). Every commit costs a
    /// write transaction and two disk syncs whatever its size, so under concurrent load fewer,
    /// larger commits take less CPU per decision; a lone producer never waits.
    public let gatherSeconds: Double
    /// Commit with one disk sync instead of two (``LedgerStore/writeDeferringSync(_:)``: LMDB leaves
    /// the meta page that publishes a commit unsynced) and hold each commit's completions until a
    /// later sync covers it: the next commit that writes (its data sync covers the meta page), or an
    /// explicit ``LedgerStore/sync()`` as soon as no request is queued. A completion therefore still
    /// means the decision is durable; it only may come one commit later.
    public let deferringSync: Bool
    /// Decide the next requests while a commit syncs (``Ledger/decideAhead(_:after:overlay:)``): the
    /// writer takes them before its commit and another thread decides them on the store as that
    /// commit leaves it; the next commit writes what was decided, or decides again when anything else
    /// was committed in between. Not with ``deferringSync``.
    public let readingAhead: Bool
    private let ledger: Ledger
    private let onCommit: (@Sendable (Commit) -> Void)?
    private let condition = NSCondition()
    private var pending: [Request] = []
    /// A request's groups, each prepared by its producer (or the error that kept it from being prepared).
    private typealias Request = (groups: [Result<Ledger.PreparedGroup, any Error>], size: Int, completion: Completion)
    private var depth = 0
    private var committing = 0
    private var closed = false
    /// Requests completed by the last commit (``gatherSeconds`` applies when above 1).
    private var lastRequests = 0
    /// The writer is waiting ``gatherSeconds`` for more requests: only a full group wakes it early.
    private var gathering = false
    private let finished = DispatchSemaphore(value: 0)
    /// Decides requests ahead (``readingAhead``): a thread of its own, so that deciding, which the
    /// next commit waits for, never queues behind the parse work on Dispatch's threads.
    private let decider: WorkerThread?

    /// Starts the writer thread. `onCommit` runs on it after each commit (keep it short).
    public init(
        ledger: Ledger, capacity: Int = 8_192, maximumGroup: Int = 1_000, gatherSeconds: Double = 0, deferringSync: Bool = false,
        readingAhead: Bool = false, onCommit: (@Sendable (Commit) -> Void)? = nil
    ) {
        self.ledger = ledger
        self.capacity = max(1, capacity)
        self.maximumGroup = max(1, maximumGroup)
        self.gatherSeconds = max(0, gatherSeconds)
        self.deferringSync = deferringSync
        self.readingAhead = readingAhead && !deferringSync
        self.onCommit = onCommit
        decider = self.readingAhead ? WorkerThread() : nil
        let writer = Thread { [self] in run() }
        writer.name = "ledger-writer"
        writer.start()
    }

    deinit { decider?.stop() }

    /// Submissions queued and not yet taken by the writer.
    public var queueDepth: Int { condition.withLock { depth } }

    /// Submissions the writer has taken and not yet completed (deciding or committing them).
    public var inProgress: Int { condition.withLock { committing } }

    /// Queues a request: `groups`, to be decided in order, each at its own time. `completion` runs
    /// on the writer thread once their commit is durable; keep it short (it holds up the next commit).
    /// With `waitingForRoom`, a full queue makes the caller wait until the writer has taken enough
    /// (a single producer streaming its input, as `ledger submit` does) instead of refusing.
    /// - Throws: ``Refusal/full`` when the queue has no room for its submissions (an empty queue
    ///   takes any request) and the caller does not wait, ``Refusal/closed`` after ``close()``.
    public func enqueue(_ groups: Groups, waitingForRoom: Bool = false, completion: @escaping Completion) throws(Refusal) {
        // Validating and keying need no store: done here, on the producer's thread, not the writer's.
        try enqueue(
            prepared: groups.map { group in Result { try ledger.prepare(group) } }, size: groups.reduce(0) { $0 + $1.submissions.count },
            waitingForRoom: waitingForRoom, completion: completion)
    }

    /// Queues the groups of `lines`, already validated and keyed by ``SubmitProtocol/prepare(_:caller:threads:)``
    /// on the threads that parsed them; otherwise as ``enqueue(_:waitingForRoom:completion:)-(Groups,_,_)``.
    public func enqueue(_ lines: SubmitProtocol.PreparedLines, waitingForRoom: Bool = false, completion: @escaping Completion) throws(Refusal) {
        try enqueue(
            prepared: lines.keyed.map { .success($0) }, size: lines.keyed.reduce(0) { $0 + $1.submissions.count }, waitingForRoom: waitingForRoom,
            completion: completion)
    }

    private func enqueue(
        prepared: [Result<Ledger.PreparedGroup, any Error>], size: Int, waitingForRoom: Bool, completion: @escaping Completion
    ) throws(Refusal) {
        condition.lock()
        defer { condition.unlock() }
        while waitingForRoom && !closed && !hasRoom(for: size) { condition.wait() }
        guard !closed else { throw .closed }
        guard hasRoom(for: size) else { throw .full }
        pending.append((prepared, size, completion))
        depth += size
        if !gathering || depth >= maximumGroup { condition.broadcast() }
    }

    /// Whether the queue takes `size` more submissions now (call with the lock held).
    private func hasRoom(for size: Int) -> Bool { depth == 0 || depth + size <= capacity }

    /// Refuses new requests, decides and completes everything queued, then stops the writer.
    /// Returns once the last commit is durable. Idempotent.
    public func close() {
        condition.withLock {
            closed = true
            condition.broadcast()
        }
        finished.wait()
        finished.signal()  // for the next caller
    }

    /// Requests decided by one commit, with what became of their groups (in order).
    private typealias Decided = (requests: [Request], results: [Result<[Decision], any Error>])

    private func run() {
        // With ``deferringSync``: commits whose completions wait for a sync, oldest first, each with
        // the store's count of the write group that must be durable first.
        var held: [(decided: Decided, group: UInt64)] = []
        /// Requests taken before the last commit, and what another thread decided for them meanwhile.
        var next: Ahead?
        while let requests = next?.requests ?? nextRequests() {
            let started = DispatchTime.now()
            let results: [Result<[Decision], any Error>]
            var wroteAhead = false
            if readingAhead {
                let taken = next
                next = nil
                taken?.done.wait()
                results = ledger.submit(isolating: requests.flatMap(\.groups), ahead: taken?.decided, wroteAhead: &wroteAhead) { batch, view in
                    // Before this commit: take what is queued and decide it on the deciding thread meanwhile.
                    guard next == nil, let decider, let queued = takeRequests(waiting: false) else { return }
                    let ahead = Ahead(requests: queued)
                    next = ahead
                    let ledger = ledger
                    decider.async {
                        let ready = queued.flatMap(\.groups).compactMap { try? $0.get() }
                        ahead.decided = ready.isEmpty ? nil : ledger.decideAhead(ready, after: view, overlay: batch)
                        ahead.done.signal()
                    }
                }
            } else {
                results = ledger.submit(isolating: requests.flatMap(\.groups), deferringSync: deferringSync)
            }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
            onCommit?(Commit(submissions: requests.reduce(0) { $0 + $1.size }, requests: requests.count, seconds: seconds, decidedAhead: wroteAhead))
            guard deferringSync, let durability = ledger.store.durability else {
                complete((requests, results))
                let size = requests.reduce(0) { $0 + $1.size }
                Disposal.shared.release(consume requests)
                condition.withLock { committing -= size }
                continue
            }
            held.append(((requests, results), durability.committed))
            while let first = held.first, first.group <= durability.durable {
                complete(first.decided)
                Disposal.shared.release(held.removeFirst())
            }
            // Sync now when nothing is queued (no next commit is coming to cover these), or when this
            // commit covered nothing (it wrote nothing, or failed): never hold an answer for longer.
            if !held.isEmpty && (held.count > 1 || condition.withLock { pending.isEmpty }) { syncAndComplete(&held) }
            condition.withLock { committing = 0 }
        }
        if !held.isEmpty { syncAndComplete(&held) }
        finished.signal()
    }

    /// Requests taken ahead of their commit, and their groups decided meanwhile (nil: not decided).
    private final class Ahead: @unchecked Sendable {
        let requests: [Request]
        var decided: Ledger.DecidedAhead?
        let done = DispatchSemaphore(value: 0)

        init(requests: [Request]) { self.requests = requests }
    }

    /// Completes each request of `decided` with its groups' results.
    private func complete(_ decided: Decided) {
        var results = decided.results[...]
        for request in decided.requests {
            request.completion(Array(results.prefix(request.groups.count)))
            results = results.dropFirst(request.groups.count)
        }
    }

    /// Makes `held`'s commits durable and completes them (with the sync's error when it fails: the
    /// decisions were committed but may not survive a crash), oldest first.
    private func syncAndComplete(_ held: inout [(decided: Decided, group: UInt64)]) {
        do {
            try ledger.store.sync()
            for entry in held { complete(entry.decided) }
        } catch {
            let failure = SyncFailure(description: "the commit could not be made durable (\(error)); it may not survive a crash: send it again")
            for entry in held { complete((entry.decided.requests, entry.decided.results.map { _ in .failure(failure) })) }
        }
        let completed = held
        held = []
        Disposal.shared.release(consume completed)
    }

    /// A sync that failed after its commits: their answers cannot say they are durable.
    struct SyncFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Waits for work and takes the requests pending, up to ``maximumGroup`` submissions; nil once
    /// closed and drained.
    private func nextRequests() -> [Request]? { takeRequests(waiting: true) }

    /// ``nextRequests()``; without `waiting`, nil at once when nothing is pending.
    private func takeRequests(waiting: Bool) -> [Request]? {
        condition.lock()
        defer { condition.unlock() }
        while waiting && pending.isEmpty && !closed { condition.wait() }
        guard !pending.isEmpty else { return nil }
        if waiting && gatherSeconds > 0 && lastRequests > 1 {
            gathering = true
            let deadline = Date(timeIntervalSinceNow: gatherSeconds)
            while depth < maximumGroup && !closed && condition.wait(until: deadline) {}
            gathering = false
        }
        var count = 0
        var taken = 0
        while taken < pending.count && (taken == 0 || count + pending[taken].size <= maximumGroup) {
            count += pending[taken].size
            taken += 1
        }
        let requests = Array(pending.prefix(taken))
        pending.removeFirst(taken)
        depth -= count
        committing += count
        lastRequests = taken
        condition.broadcast()  // producers waiting for room
        return requests
    }
}

extension Ledger {
    /// Decides every group in one commit, like ``submit(groups:)``; when that commit fails,
    /// decides each group alone, so one group's failure stays its own. Each result is a group's
    /// decisions or the error that kept it from being decided (nothing of it was written).
    /// With `deferringSync`, the commits may return before they are durable (``GroupCommitter/deferringSync``).
    public func submit(isolating groups: [(submissions: [Submission], at: Timestamp)], deferringSync: Bool = false) -> [Result<[Decision], any Error>]
    {
        submit(isolating: groups.map { group in Result { try prepare(group) } }, deferringSync: deferringSync)
    }

    /// ``submit(isolating:)`` of groups already prepared, writing what was decided `ahead` for them when
    /// it still holds, and calling `whenApplied` before the commit (``submit(prepared:ahead:whenApplied:)``).
    func submit(
        isolating groups: [Result<PreparedGroup, any Error>], ahead: DecidedAhead?, wroteAhead: inout Bool,
        whenApplied: (EngineBatch, ReadAheadView) -> Void
    ) -> [Result<[Decision], any Error>] {
        var wrote = false
        defer { wroteAhead = wrote }
        return isolating(groups) { ready, whole in
            guard whole else {
                wrote = false
                return try submit(prepared: ready)
            }
            return try submit(prepared: ready, ahead: ahead, wroteAhead: &wrote, whenApplied: whenApplied)
        }
    }

    /// ``submit(isolating:)`` of groups already prepared; a group that could not be prepared keeps its
    /// error. With `deferringSync`, the commits may return before they are durable (``GroupCommitter/deferringSync``).
    func submit(isolating groups: [Result<PreparedGroup, any Error>], deferringSync: Bool = false) -> [Result<[Decision], any Error>] {
        isolating(groups) { ready, _ in try submit(prepared: ready, deferringSync: deferringSync) }
    }

    /// Submits the groups that were prepared through `submit` (all at once, `whole`; if that fails,
    /// each alone), each failed group keeping its error.
    private func isolating(
        _ groups: [Result<PreparedGroup, any Error>], _ submit: ([PreparedGroup], _ whole: Bool) throws -> [[Decision]]
    ) -> [Result<[Decision], any Error>] {
        let ready = groups.compactMap { try? $0.get() }
        var decided: [Result<[Decision], any Error>] = []
        if !ready.isEmpty {
            do {
                decided = try submit(ready, true).map { .success($0) }
            } catch {
                decided = ready.count > 1 ? ready.map { group in Result { try submit([group], false)[0] } } : [.failure(error)]
            }
        }
        var next = decided.makeIterator()
        return groups.map { group in
            group.flatMap { _ in next.next() ?? .failure(SubmissionError("the group was not decided", code: "internal")) }
        }
    }
}
