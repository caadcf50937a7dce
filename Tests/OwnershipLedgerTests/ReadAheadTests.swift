import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@testable import OwnershipLedger

/// Deciding the next group while a commit syncs (``GroupCommitter/readingAhead``): what is decided on
/// the committed store under the committing group's batch is what the committed store would decide,
/// and it is decided again when anything else was committed in between.
@Suite struct ReadAheadTests {
    let t = Fixtures.start

    func transaction(_ kind: SubmissionKind, _ uid: String, _ otid: String, tid: String? = nil, at: Int64? = nil) throws -> Ledger.Submission {
        .transaction(kind, uid: uid, try Fixtures.payload(Fixtures.transaction(otid, transactionId: tid, at: at ?? t)), .trustedDecoded)
    }

    /// A history of `count` submissions over a few hundred lineages: purchases, renewals, restores by
    /// the owner and by others, deletions and purchases after them, exact retries.
    func history(_ count: Int) throws -> [Ledger.Submission] {
        var random = SeededGenerator(state: 35)
        var owners: [(otid: String, uid: String, renewals: Int)] = []
        var submissions: [Ledger.Submission] = []
        for index in 0..<count {
            let roll = Int.random(in: 0..<100, using: &random)
            if owners.isEmpty || roll < 35 {
                let otid = String(5_000_000 + index)
                let uid = "uid-ahead-\(Int.random(in: 0..<150, using: &random))"
                owners.append((otid, uid, 0))
                submissions.append(try transaction(.purchase, uid, otid))
                continue
            }
            let pick = Int.random(in: 0..<owners.count, using: &random)
            let (otid, uid, renewals) = owners[pick]
            switch roll {
            case 35..<60:
                owners[pick].renewals += 1
                submissions.append(
                    try transaction(.renewal, uid, otid, tid: "\(otid)\(renewals + 1)", at: t + Int64(renewals + 1) * 30 * Fixtures.day))
            case 60..<75: submissions.append(try transaction(.restore, "uid-ahead-\(Int.random(in: 0..<150, using: &random))", otid))
            case 75..<82: submissions.append(.deleteAccount(uid: uid))
            case 82..<90: submissions.append(submissions[Int.random(in: 0..<submissions.count, using: &random)])
            default: submissions.append(try transaction(.restore, uid, otid))
            }
        }
        return submissions
    }

    /// Collects completions in order.
    final class Collected: @unchecked Sendable {
        private let lock = NSLock()
        private var results: [Int: [Decision]] = [:]
        private(set) var commits: [GroupCommitter.Commit] = []
        let done = DispatchSemaphore(value: 0)

        func completion(_ index: Int) -> GroupCommitter.Completion {
            { groups in
                self.lock.withLock { self.results[index] = groups.flatMap { (try? $0.get()) ?? [] } }
                self.done.signal()
            }
        }

        func report(_ commit: GroupCommitter.Commit) { lock.withLock { commits.append(commit) } }
        func decisions(_ count: Int) -> [Decision] { lock.withLock { (0..<count).flatMap { results[$0] ?? [] } } }
        var all: [GroupCommitter.Commit] { lock.withLock { commits } }
    }

    /// Requests queued faster than they commit are decided ahead, and every answer, record and binding
    /// is the one deciding each request after the last commit gives.
    @Test func groupsDecidedAheadAnswerAsGroupsDecidedInTheirOwnWrite() throws {
        let (ahead, aheadDirectory) = try Fixtures.ledger()
        let (plain, plainDirectory) = try Fixtures.ledger()
        defer { [aheadDirectory, plainDirectory].forEach { $0.remove() } }
        let submissions = try history(1_200)
        let requests = stride(from: 0, to: submissions.count, by: 6).map { Array(submissions[$0..<min($0 + 6, submissions.count)]) }

        let collected = Collected()
        let committer = GroupCommitter(ledger: ahead, capacity: 240, maximumGroup: 60, readingAhead: true, onCommit: collected.report)
        for (index, request) in requests.enumerated() {
            try committer.enqueue([(request, t)], waitingForRoom: true, completion: collected.completion(index))
        }
        committer.close()
        for _ in requests { collected.done.wait() }

        let expected = try requests.flatMap { try plain.submit($0, at: t) }
        #expect(collected.decisions(requests.count) == expected)
        #expect(collected.all.contains { $0.decidedAhead }, "no group was decided ahead")
        #expect(collected.all.contains { !$0.decidedAhead })
        #expect(try ahead.store.replay().isIntact)
        #expect(try ahead.store.head().sequence == plain.store.head().sequence)
        for otid in Set(
            submissions.compactMap { submission -> String? in
                if case .transaction(_, _, let payload, _) = submission { return payload.originalTransactionId }
                return nil
            })
        {
            #expect(try ahead.binding(originalTransactionId: otid).uid == plain.binding(originalTransactionId: otid).uid)
        }
    }

    /// A group decided ahead reads, through the committing group's batch, what the committed store
    /// reads once that group is visible, before its commit (the snapshot before it, whose regions
    /// the group merged) and after it; the lineages, accounts and commands of every region included.
    @Test func theViewAheadReadsWhatTheCommittedStoreReads() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let submissions = try history(900)
        _ = try ledger.submit(Array(submissions[..<600]), at: t)
        let prepared = try ledger.prepare((Array(submissions[600...]), t))
        let probes = try ledger.prepare((submissions, t)).submissions

        let lineages = probes.compactMap(\.lineage).reduce(into: [LineageKey]()) { if !$0.contains($1) { $0.append($1) } }
        @Sendable func read(_ reader: any EngineReader) throws -> String {
            let vault = try reader.identities(vaultKeys: probes.compactMap(\.vaultKey))
            let accounts = vault.values.map(\.account).sorted { "\($0)" < "\($1)" }
            let states = try reader.lineageStates(lineages)
            let bound = try reader.lineages(boundTo: accounts).mapValues { $0.map { "\($0)" }.sorted() }
            let deleted = try reader.deletedAccounts(among: accounts)
            let commands = try reader.latestRecords(of: probes.map(\.commandRef)).mapValues(\.sequence)
            let sealed = try accounts.map { try reader.sealedUID(of: $0) }
            return "\(try reader.head()) \(lineages.map { states[$0].map { "\($0)" } ?? "-" }) \(accounts.map { bound[$0] ?? [] })"
                + " \(accounts.map { deleted.contains($0) }) \(probes.map { commands[$0.commandRef.key] ?? 0 })"
                + " \(probes.map { $0.vaultKey.flatMap { vault[$0] }.map { "\($0)" } ?? "-" }) \(sealed)"
        }

        final class Read: @unchecked Sendable { var value: String? }
        let before = Read()
        var view: ReadAheadView?
        var batch: EngineBatch?
        var wrote = false
        _ = try ledger.submit(prepared: [prepared], ahead: nil, wroteAhead: &wrote) { applied, captured in
            // Inside the write, before its commit: another thread reads the snapshot before it.
            (batch, view) = (applied, captured)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                before.value = try? ledger.store.engine.readAhead(captured) { try read(OverlayReader(base: $0, batch: applied)) }
                done.signal()
            }
            done.wait()
        }
        let committed = try ledger.store.read { try read($0) }
        #expect(before.value == committed)
        // A view is read ahead once only.
        #expect(try ledger.store.engine.readAhead(#require(view)) { _ in true } == nil)
        #expect(try #require(batch).records.count > 100)
    }

    /// A group decided ahead is decided again when another write committed after the view it was
    /// decided on: its answer follows that write.
    @Test func aWriteInBetweenMakesTheGroupDecidedAgain() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let first = try ledger.prepare(([try transaction(.purchase, "uid-first", "7000")], t))
        let next = try ledger.prepare(([try transaction(.purchase, "uid-next", "7001")], t))
        var wrote = false
        var ahead: Ledger.DecidedAhead?
        _ = try ledger.submit(prepared: [first], ahead: nil, wroteAhead: &wrote) { batch, view in
            ahead = ledger.decideAhead([next], after: view, overlay: batch)
        }
        #expect(ahead?.decided.decisions.first?.first?.outcome == .granted)
        // Another account buys the same lineage first.
        #expect(try ledger.submit(try transaction(.purchase, "uid-other", "7001"), at: t).outcome == .granted)
        let decisions = try ledger.submit(prepared: [next], ahead: ahead, wroteAhead: &wrote) { _, _ in }
        #expect(!wrote)
        #expect(decisions.first?.first?.outcome == .denied)
        #expect(try ledger.binding(originalTransactionId: "7001").uid == "uid-other")
        #expect(try ledger.store.replay().isIntact)

        // With nothing in between, what was decided ahead is written as it is.
        let third = try ledger.prepare(([try transaction(.purchase, "uid-third", "7002")], t))
        _ = try ledger.submit(prepared: [next], ahead: nil, wroteAhead: &wrote) { batch, view in
            ahead = ledger.decideAhead([third], after: view, overlay: batch)
        }
        _ = try ledger.submit(prepared: [third], ahead: ahead, wroteAhead: &wrote) { _, _ in }
        #expect(wrote)
        #expect(try ledger.binding(originalTransactionId: "7002").uid == "uid-third")
        #expect(try ledger.store.replay().isIntact)
    }
}
