import AppleSignedData
import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The shared writer: what is pending is decided as one group and committed once, completions come
/// only after the commit, overload is refused, `close` drains, and one bad request stays its own.
@Suite struct GroupCommitterTests {
    let t = Fixtures.start

    func purchase(_ uid: String, _ otid: String) throws -> Ledger.Submission {
        .transaction(.purchase, uid: uid, try Fixtures.payload(Fixtures.transaction(otid, at: t)), .trustedDecoded)
    }

    /// Holds the writer inside its first commit report until released.
    final class Gate: @unchecked Sendable {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var commits: [GroupCommitter.Commit] = []
        private var first = true

        func report(_ commit: GroupCommitter.Commit) {
            let hold = lock.withLock {
                commits.append(commit)
                defer { first = false }
                return first
            }
            if hold {
                entered.signal()
                release.wait()
            }
        }

        var all: [GroupCommitter.Commit] { lock.withLock { commits } }
    }

    /// Collects completions.
    final class Outcomes: @unchecked Sendable {
        private let lock = NSLock()
        private var results: [Int: Result<[Decision], any Error>] = [:]
        let done = DispatchSemaphore(value: 0)

        /// Records the request's groups as `index`, `index + 1`, …
        func completion(_ index: Int) -> GroupCommitter.Completion {
            { groups in
                self.lock.withLock { for (offset, result) in groups.enumerated() { self.results[index + offset] = result } }
                self.done.signal()
            }
        }

        func wait(_ count: Int) { for _ in 0..<count { done.wait() } }
        func decision(_ index: Int) -> Decision? { lock.withLock { try? results[index]?.get().first } }
        func error(_ index: Int) -> (any Error)? {
            lock.withLock {
                guard case .failure(let error) = results[index] else { return nil }
                return error
            }
        }
    }

    @Test func everythingPendingIsDecidedInOneCommitAndCompletedOnlyOnceItIsVisible() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("first", "100")], t)], completion: outcomes.completion(0))
        gate.entered.wait()  // the writer has committed the first group and is held before completing it
        #expect(outcomes.decision(0) == nil, "completed before its commit was reported")
        for index in 1...100 { try committer.enqueue([([try purchase("u\(index)", "\(100 + index)")], t)], completion: outcomes.completion(index)) }
        #expect(committer.queueDepth == 100)
        gate.release.signal()
        outcomes.wait(101)
        #expect(gate.all.map(\.requests) == [1, 100], "the 100 requests waiting were decided as one group")
        #expect(gate.all.map(\.submissions) == [1, 100])
        for index in 0...100 {
            #expect(outcomes.decision(index)?.outcome == .granted)
            // Completed means committed: another reader sees it.
            #expect(try ledger.binding(originalTransactionId: "\(100 + index)").uid == (index == 0 ? "first" : "u\(index)"))
        }
        committer.close()
    }

    /// With a gather window, a writer whose last commit completed several requests waits for more
    /// (here until its group is full) before committing; a lone request is never held for it.
    @Test func underConcurrentLoadTheWriterGathersALargerGroupAndALoneRequestIsNotHeld() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let gate = Gate()
        // A window far longer than any test: only a full group (2) ends it, or a lone request skips it.
        let committer = GroupCommitter(ledger: ledger, maximumGroup: 2, gatherSeconds: 3_600, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("lone", "200")], t)], completion: outcomes.completion(0))
        gate.entered.wait()  // committed at once: the writer had no earlier commit of several requests
        for index in 1...2 { try committer.enqueue([([try purchase("u\(index)", "\(200 + index)")], t)], completion: outcomes.completion(index)) }
        gate.release.signal()
        outcomes.wait(3)  // the two waiting requests, one commit: the next wake-up gathers
        try committer.enqueue([([try purchase("u3", "203")], t)], completion: outcomes.completion(3))
        try committer.enqueue([([try purchase("u4", "204")], t)], completion: outcomes.completion(4))
        outcomes.wait(2)
        #expect(gate.all.map(\.requests) == [1, 2, 2], "the request after a group of two waited for the next one")
        #expect((0...4).allSatisfy { outcomes.decision($0)?.outcome == .granted })
        committer.close()
    }

    @Test func closingEndsAGatherAndCommitsWhatWaits() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, gatherSeconds: 3_600, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("a", "300")], t)], completion: outcomes.completion(0))
        gate.entered.wait()
        for index in 1...2 { try committer.enqueue([([try purchase("b\(index)", "\(300 + index)")], t)], completion: outcomes.completion(index)) }
        gate.release.signal()
        outcomes.wait(3)
        try committer.enqueue([([try purchase("c", "303")], t)], completion: outcomes.completion(3))  // gathered, alone
        committer.close()  // returns once it is durable, without waiting out the window
        #expect(outcomes.decision(3)?.outcome == .granted)
        #expect(gate.all.map(\.requests) == [1, 2, 1])
    }

    /// A committer of capacity 10 whose writer is held inside its first commit (request 0) while
    /// requests 1–10 fill its queue.
    func fullQueue() throws -> (Ledger, TemporaryDirectory, Gate, GroupCommitter, Outcomes) {
        let (ledger, directory) = try Fixtures.ledger()
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, capacity: 10, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("a", "1")], t)], completion: outcomes.completion(0))
        gate.entered.wait()
        for index in 1...10 { try committer.enqueue([([try purchase("b\(index)", "\(10 + index)")], t)], completion: outcomes.completion(index)) }
        return (ledger, directory, gate, committer, outcomes)
    }

    @Test func aFullQueueRefusesAtOnceAndTakesRequestsAgainOnceDrained() throws {
        let (ledger, directory, gate, committer, outcomes) = try fullQueue()
        defer { directory.remove() }
        #expect(throws: GroupCommitter.Refusal.full) {
            try committer.enqueue([([try purchase("c", "99")], t)], completion: outcomes.completion(99))
        }
        #expect(committer.queueDepth == 10)
        gate.release.signal()
        outcomes.wait(11)
        #expect((0...10).allSatisfy { outcomes.decision($0)?.outcome == .granted })
        #expect(try ledger.binding(originalTransactionId: "99").state == "unbound", "the refused request was never decided")
        // An empty queue takes even a request larger than the capacity.
        let big = try (0..<25).map { try purchase("d\($0)", "\(200 + $0)") }
        try committer.enqueue([(big, t)], completion: outcomes.completion(200))
        outcomes.wait(1)
        committer.close()
        #expect(try ledger.account(uid: "d24").entitlements.count == 1)
    }

    @Test func aProducerWaitingForRoomIsQueuedOnceTheWriterTakesTheQueue() throws {
        let (_, directory, gate, committer, outcomes) = try fullQueue()
        defer { directory.remove() }
        let queued = DispatchSemaphore(value: 0)
        let late = try purchase("c", "99")
        Thread {
            try? committer.enqueue([([late], Fixtures.start)], waitingForRoom: true, completion: outcomes.completion(99))
            queued.signal()
        }.start()
        #expect(queued.wait(timeout: .now() + 0.5) == .timedOut, "queued while the queue was full")
        #expect(committer.queueDepth == 10)
        gate.release.signal()
        queued.wait()
        outcomes.wait(12)
        #expect(outcomes.decision(99)?.outcome == .granted)
        #expect(gate.all.map(\.submissions).reduce(0, +) == 12)
        committer.close()
    }

    @Test func closeDecidesWhatIsQueuedThenRefuses() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("a", "1")], t)], completion: outcomes.completion(0))
        gate.entered.wait()
        for index in 1...20 { try committer.enqueue([([try purchase("q\(index)", "\(index + 1)")], t)], completion: outcomes.completion(index)) }
        let closed = DispatchSemaphore(value: 0)
        Thread {
            committer.close()
            closed.signal()
        }.start()
        gate.release.signal()
        closed.wait()
        #expect((0...20).allSatisfy { outcomes.decision($0)?.outcome == .granted }, "close returned before the queue was decided")
        #expect(throws: GroupCommitter.Refusal.closed) {
            try committer.enqueue([([try purchase("late", "500")], t)], completion: outcomes.completion(500))
        }
        committer.close()  // again: returns at once
    }

    /// Records, at each completion, how many commits the writer had reported and the store's durability.
    final class Witness: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [Int: (commits: Int, durability: EngineDurability?)] = [:]
        let done = DispatchSemaphore(value: 0)

        func completion(_ index: Int, gate: Gate, store: LedgerStore) -> GroupCommitter.Completion {
            { _ in
                let state = (gate.all.count, store.durability)
                self.lock.withLock { self.seen[index] = state }
                self.done.signal()
            }
        }

        func wait(_ count: Int) { for _ in 0..<count { done.wait() } }
        subscript(index: Int) -> (commits: Int, durability: EngineDurability?)? { lock.withLock { seen[index] } }
    }

    /// With `deferringSync`, LMDB commits without syncing the meta page; a commit's requests are
    /// completed only once a later sync covers it: the next commit's data sync while requests keep
    /// coming, an explicit sync once none is queued. Never before.
    @Test func deferringTheSyncCompletesACommitOnlyOnceALaterSyncCoversIt() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, deferringSync: true, onCommit: gate.report)
        let witness = Witness()
        try committer.enqueue([([try purchase("first", "600")], t)], completion: witness.completion(0, gate: gate, store: ledger.store))
        gate.entered.wait()  // committed, reported, held before anything is completed
        let first = ledger.store.durability
        if let first {
            #expect(first.durable < first.committed, "the commit's meta page was synced: nothing was deferred")
        }
        for index in 1...5 {
            try committer.enqueue(
                [([try purchase("u\(index)", "\(600 + index)")], t)], completion: witness.completion(index, gate: gate, store: ledger.store))
        }
        gate.release.signal()
        witness.wait(6)
        committer.close()
        #expect(gate.all.map(\.requests) == [1, 5])
        guard let first else {
            // An engine whose commits are durable as they return (PostgreSQL): nothing is held.
            #expect(witness[0]?.commits == 1)
            return
        }
        // Request 0 waited for the second commit, whose data sync made the first commit durable.
        #expect(witness[0]?.commits == 2)
        #expect((witness[0]?.durability?.durable ?? 0) >= first.committed)
        // Requests 1–5: nothing more was queued, so the writer synced before completing them.
        for index in 1...5 {
            let durability = witness[index]?.durability
            #expect(durability != nil && durability?.durable == durability?.committed)
        }
        for index in 0...5 { #expect(try ledger.binding(originalTransactionId: "\(600 + index)").state == "bound") }
    }

    /// The store's account of durability: a deferred commit is committed and not yet durable; the
    /// next commit that writes covers it; a group that writes nothing counts nothing; `sync` covers all.
    @Test func theStoreCountsDeferredCommitsUntilASyncCoversThem() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        guard let start = ledger.store.durability else {
            // Commits durable as they return: nothing to count, and sync has nothing to do.
            try ledger.store.sync()
            #expect(ledger.store.durability == nil)
            return
        }
        #expect(try ledger.submit(isolating: [([purchase("a", "700")], t)], deferringSync: true).allSatisfy { (try? $0.get()) != nil })
        let deferred = try #require(ledger.store.durability)
        #expect(deferred.committed > start.committed)
        #expect(deferred.durable == deferred.committed - 1)
        #expect(try ledger.submit(isolating: [([purchase("b", "701")], t)], deferringSync: true).allSatisfy { (try? $0.get()) != nil })
        let next = try #require(ledger.store.durability)
        #expect(next.durable == deferred.committed, "the next commit's data sync covers the deferred one")
        #expect(next.committed == deferred.committed + 1)
        // A duplicate decides nothing new: no transaction is committed, nothing more becomes durable.
        #expect(try ledger.submit(isolating: [([purchase("b", "701")], t)], deferringSync: true).allSatisfy { (try? $0.get()) != nil })
        #expect(ledger.store.durability == next)
        try ledger.store.sync()
        let synced = try #require(ledger.store.durability)
        #expect(synced.durable == synced.committed && synced.committed == next.committed)
        #expect(try ledger.submit(isolating: [([purchase("c", "702")], t)]).allSatisfy { (try? $0.get()) != nil })
        let plain = try #require(ledger.store.durability)
        #expect(plain.durable == plain.committed && plain.committed == next.committed + 1, "a plain commit is durable as it returns")
    }

    @Test func aRequestThatCannotBeDecidedFailsAloneAndAppendsNothing() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let notification = try NotificationPayload(
            json: Fixtures.members(Fixtures.notification("DID_RENEW", uuid: "n-1", transaction: Fixtures.transaction("7", at: t), at: t)))
        let conflicting = try NotificationPayload(
            json: Fixtures.members(Fixtures.notification("REFUND", uuid: "n-1", transaction: Fixtures.transaction("7", at: t), at: t)))
        _ = try ledger.submit(.notification(notification, .trustedDecoded), at: t)
        let head = try ledger.store.head().sequence
        let gate = Gate()
        let committer = GroupCommitter(ledger: ledger, onCommit: gate.report)
        let outcomes = Outcomes()
        try committer.enqueue([([try purchase("a", "1")], t)], completion: outcomes.completion(0))
        gate.entered.wait()
        try committer.enqueue([([try purchase("b", "2")], t)], completion: outcomes.completion(1))
        // One request of three groups, the middle one undecidable: each group has its own result.
        try committer.enqueue(
            [([try purchase("c", "3")], t), ([.notification(conflicting, .trustedDecoded)], t), ([try purchase("d", "4")], t + 1)],
            completion: outcomes.completion(2))
        gate.release.signal()
        outcomes.wait(3)
        #expect([0, 1, 2, 4].allSatisfy { outcomes.decision($0)?.outcome == .granted })
        #expect((outcomes.error(3) as? SubmissionError)?.code == "conflict")
        // The four purchases appended what they append alone; the conflicting notification nothing.
        let (control, controlDirectory) = try Fixtures.ledger()
        defer { controlDirectory.remove() }
        let controlHead = try control.store.head().sequence
        _ = try control.submit(groups: [
            ([try purchase("a", "1"), try purchase("b", "2"), try purchase("c", "3")], t), ([try purchase("d", "4")], t + 1),
        ])
        #expect(try ledger.store.head().sequence - head == control.store.head().sequence - controlHead)
        #expect(try ledger.binding(originalTransactionId: "2").uid == "b")
        #expect(try ledger.store.replay().isIntact)
        committer.close()
    }

    @Test func sixtyFourAccountsRacingForOneNewLineageLeaveExactlyOneOwner() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let committer = GroupCommitter(ledger: ledger)
        let payload = try Fixtures.payload(Fixtures.transaction("4242", at: t))
        let decisions = concurrently(64) { index -> Outcome? in
            let outcome = Outcomes()
            do {
                try committer.enqueue(
                    [([.transaction(.purchase, uid: "racer-\(index)", payload, .trustedDecoded)], Fixtures.start)],
                    completion: outcome.completion(0))
            } catch {
                return nil
            }
            outcome.wait(1)
            return outcome.decision(0)?.outcome
        }
        committer.close()
        #expect(decisions.filter { $0 == .granted }.count == 1)
        #expect(decisions.filter { $0 == .denied }.count == 63)
        let owner = try #require(try ledger.binding(originalTransactionId: "4242").uid)
        #expect(try ledger.account(uid: owner).entitlements.count == 1)
        #expect(try ledger.store.replay().isIntact)
    }
}
