public import AppleSignedData
import Foundation
public import LedgerCore
import LedgerCrypto
import LedgerStore
import Projections

/// Forensic replay: a lineage's history step by step, and why an account is or is not entitled.
/// Everything here is computed from the records alone (the persisted read models are not read), so
/// the same functions serve the live store and an offline dispute bundle.
public enum Forensics {
    /// Where a replay stops: after a sequence number, or after a time (inclusive).
    public enum Limit: Equatable, Sendable {
        case sequence(UInt64)
        case time(Timestamp)

        /// The records this limit keeps: a prefix (for a time, through the last record recorded at or
        /// before it, so out-of-order times never yield a state that did not exist).
        func prefix(of records: [(record: Record, stored: [UInt8])]) -> [(record: Record, stored: [UInt8])] {
            switch self {
            case .sequence(let last): return records.filter { $0.record.sequence <= last }
            case .time(let time):
                let kept = records.map(\.record).prefix(throughRecordedAt: time).count
                return Array(records.prefix(kept))
            }
        }
    }

    /// One step of a lineage's history: a submission's batch (its fact, the effects on this lineage,
    /// its decision) and the lineage's state after it.
    public struct Step: Sendable {
        /// The sequence numbers of the step's records that concern the lineage, in order.
        public var sequences: [UInt64]
        public var recordedAt: Timestamp
        /// The name of the first event (`transaction-submitted`, `account-deletion-requested`, …).
        public var event: String
        /// What happened, in words.
        public var what: String
        /// The decision recorded, when the step has one.
        public var decision: DecisionReason?
        /// The sequence number of the decision record.
        public var decisionSequence: UInt64?
        /// Why the ledger decided as it did, in words, citing earlier sequence numbers.
        public var why: String
        /// The effects on this lineage, as `name@seq`.
        public var effects: [String]
        /// The lineage's state after the step.
        public var state: LineageState
        /// Whether the entitlement was active at the step's time.
        public var entitledAfter: Bool

        public var firstSequence: UInt64 { sequences.first ?? 0 }
    }

    /// Is `event` decided by the ledger within a batch (as opposed to the fact that starts a batch)?
    static func isEffect(_ event: LedgerEvent) -> Bool {
        switch event {
        case .lineageBound, .entitlementGranted, .entitlementEnded, .entitlementRevoked, .entitlementReinstated,
            .lineageTombstoned, .accountDeleted, .decisionIssued:
            true
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .staffEnrolled, .staffRemoved,
            .transferRequested, .transferApproved, .transferApplied, .transferRefused:
            false
        }
    }

    /// Whether `event` may appear in `lineage`'s history: it names the lineage, or names no lineage
    /// (a deletion's fact, the account deletion and its decision).
    static func concerns(_ event: LedgerEvent, lineage: LineageKey) -> Bool {
        event.lineage == nil || event.lineage == lineage
    }

    /// The records of `lineage`'s history, in order: every record the lineage index lists, plus, for
    /// a deletion that tombstoned the lineage, the deletion's fact, `accountDeleted` and decision
    /// (which name the account, not the lineage). Effects of the same deletion on the account's other
    /// lineages are left out.
    /// - Complexity: O(events in the lineage + records of the deletions that touched it).
    public static func lineageRecords(
        _ lineage: LineageKey, in session: ReadSession, until limit: Limit? = nil
    ) throws -> [(record: Record, stored: [UInt8])] {
        var wanted = Set<UInt64>()
        // Decoded records already read (records of other lineages are dropped after a case scan).
        var loaded: [UInt64: (record: Record, stored: [UInt8])] = [:]
        func load(_ sequence: UInt64) throws -> (record: Record, stored: [UInt8])? {
            if let entry = loaded[sequence] { return entry }
            guard let stored = try session.storedRecord(sequence) else { return nil }
            let entry = (record: try RecordCodec.decode(stored, sequence: sequence), stored: stored)
            loaded[sequence] = entry
            return entry
        }
        // A transfer's approval and refusals name the case, not the lineage: look for them between the
        // request and the case's application (or the head while the case is open).
        func addCaseSteps(_ caseId: String, after request: UInt64) throws {
            var sequence = request + 1
            while let entry = try load(sequence) {
                switch entry.record.event {
                case .transferApproved(let e) where e.caseId == caseId: wanted.insert(sequence)
                case .transferRefused(let e) where e.caseId == caseId: wanted.insert(sequence)
                case .transferApplied(let e) where e.caseId == caseId: return
                default: loaded[sequence] = nil
                }
                sequence += 1
            }
        }
        func isDeletionEffect(_ event: LedgerEvent) -> Bool {
            switch event {
            case .lineageTombstoned, .entitlementEnded(_, _, .accountDeleted): true
            default: false
            }
        }
        let indexedSequences = try session.sequences(ofLineage: lineage)
        for indexed in indexedSequences where indexed > 0 {
            wanted.insert(indexed)
            if case .transferRequested(let request)? = try load(indexed)?.record.event {
                try addCaseSteps(request.plan.caseId, after: indexed)
            }
            guard case .lineageTombstoned(_, let former)? = try load(indexed)?.record.event else { continue }
            var back = indexed - 1
            while back >= 1, let entry = try load(back) {
                if case .accountDeletionRequested(let account) = entry.record.event, account == former { wanted.insert(back) }
                guard isDeletionEffect(entry.record.event) else { break }
                back -= 1
            }
            var forward = indexed + 1
            scan: while let entry = try load(forward) {
                switch entry.record.event {
                case .lineageTombstoned, .entitlementEnded(_, _, .accountDeleted): break
                case .accountDeleted(let account): if account == former { wanted.insert(forward) }
                case .decisionIssued(let d):
                    if d.account == former && d.lineage == nil { wanted.insert(forward) }
                    break scan
                default: break scan
                }
                forward += 1
            }
        }
        var out: [(record: Record, stored: [UInt8])] = []
        for sequence in wanted.sorted() {
            guard let entry = try load(sequence) else { continue }
            out.append(entry)
        }
        // The lineage index chose these records: every event that changes the lineage's binding or
        // entitlement is indexed under it, so replaying them must give the persisted state. A
        // mismatch means a damaged index; refuse rather than tell (or sign) a wrong history.
        let replayed = StateProjection.fold(out.map(\.record.event)).lineage(lineage)
        guard replayed == (try session.loadState(lineages: [lineage]).lineage(lineage)) else {
            throw LedgerStoreError.corrupt(
                "the lineage index disagrees with the persisted state of lineage \(lineage): run `ledger verify`, then `ledger rebuild` to repair the indexes"
            )
        }
        return limit?.prefix(of: out) ?? out
    }

    // MARK: Timeline

    /// What the history of one lineage established, with the sequence numbers that established it.
    struct History {
        let lineage: LineageKey
        var state = LedgerState()
        var boundAt: UInt64?
        var grantedAt: UInt64?
        var revokedAt: UInt64?
        var endedAt: UInt64?
        var tombstonedAt: UInt64?
        var deletedAt: UInt64?
        var transfers: [(sequence: UInt64, event: TransferApplied)] = []
        var decisions: [(sequence: UInt64, decision: DecisionIssued)] = []

        init(lineage: LineageKey) { self.lineage = lineage }

        var current: LineageState { state.lineage(lineage) }

        mutating func apply(_ record: Record) {
            let seq = record.sequence
            switch record.event {
            case .lineageBound: boundAt = seq
            case .entitlementGranted:
                grantedAt = seq
                endedAt = nil
            case .entitlementRevoked: revokedAt = seq
            case .entitlementReinstated: revokedAt = nil
            case .entitlementEnded: endedAt = seq
            case .lineageTombstoned: tombstonedAt = seq
            case .accountDeleted: deletedAt = seq
            case .transferApplied(let e):
                transfers.append((seq, e))
                boundAt = seq
                grantedAt = nil
                revokedAt = nil
                endedAt = nil
                tombstonedAt = nil
            case .decisionIssued(let d): decisions.append((seq, d))
            default: break
            }
            if record.event.lineage == nil || record.event.lineage == lineage {
                StateProjection.evolve(&state, record.event)
            }
        }
    }

    /// The timeline of `records` (a lineage's records in order, as ``lineageRecords(_:in:until:)``
    /// gives them): one step per batch, with the state after each.
    public static func timeline(of records: [Record], lineage: LineageKey) -> [Step] {
        var history = History(lineage: lineage)
        var steps: [Step] = []
        var index = 0
        while index < records.count {
            var batch = [records[index]]
            index += 1
            while index < records.count, joins(records[index], batch) {
                batch.append(records[index])
                index += 1
            }
            let before = history
            for record in batch { history.apply(record) }
            steps.append(step(batch, before: before, after: history))
        }
        return steps
    }

    /// Whether `record` belongs to the step `batch` has started: an effect or decision recorded at the
    /// same time, before the step's decision. A transfer's rebinding joins the ending it follows.
    static func joins(_ record: Record, _ batch: [Record]) -> Bool {
        guard let last = batch.last, last.recordedAt == record.recordedAt, !isDecision(last.event) else { return false }
        switch record.event {
        case .transferApplied:
            if case .entitlementEnded(_, _, .transferred) = last.event { return true }
            return false
        case .entitlementEnded(_, _, .transferred): return false
        default: return isEffect(record.event)
        }
    }

    static func isDecision(_ event: LedgerEvent) -> Bool {
        if case .decisionIssued = event { return true }
        return false
    }

    static func step(_ batch: [Record], before: History, after: History) -> Step {
        let first = batch.first { if case .transferApplied = $0.event { return true } else { return false } } ?? batch[0]
        var decision: DecisionIssued?
        var decisionSequence: UInt64?
        var effects: [String] = []
        for record in batch where record.sequence != first.sequence {
            if case .decisionIssued(let d) = record.event {
                decision = d
                decisionSequence = record.sequence
            } else {
                effects.append("\(record.event.name)@\(record.sequence)")
            }
        }
        let state = after.current
        return Step(
            sequences: batch.map(\.sequence), recordedAt: first.recordedAt, event: first.event.name, what: describe(first.event),
            decision: decision?.reason, decisionSequence: decisionSequence,
            why: why(first.event, decision: decision, before: before, after: after), effects: effects, state: state,
            entitledAfter: state.activeEntitlement(at: first.recordedAt) != nil)
    }

    static func short(_ account: AccountID) -> String { "account \(account.description.prefix(8))…" }

    static func describe(_ event: LedgerEvent) -> String {
        switch event {
        case .transactionSubmitted(let e):
            let who = e.account.map { " by \(short($0))" } ?? " (speaks for no account)"
            let expiry = e.transaction.expiresDate.map { ", expires \(LedgerTime.format($0))" } ?? ""
            return "\(e.kind.name)\(who) of \(e.transaction.productId)\(expiry), \(e.transaction.ownership.appleValue)"
        case .notificationReceived(let e):
            return "App Store notification \(e.notificationType)\(e.subtype.map { "/\($0)" } ?? "")"
        case .accountDeletionRequested(let account): return "deletion requested by \(short(account))"
        case .transferRequested(let e):
            return "support case \(e.plan.caseId) requested moving the lineage to \(short(e.plan.target)) (by \(e.requestedBy))"
        case .transferApproved(let e): return "support case \(e.caseId) approved by \(e.approvedBy)"
        case .transferApplied(let e):
            return "support case \(e.caseId) moved the lineage from \(short(e.source.account)) to \(short(e.target)) (by \(e.appliedBy))"
        case .transferRefused(let e): return "support case \(e.caseId): \(e.step) by \(e.staff) refused"
        default: return event.name
        }
    }

    /// The reason for a decision in context.
    static func why(_ fact: LedgerEvent, decision: DecisionIssued?, before: History, after: History) -> String {
        guard let decision else {
            switch fact {
            case .transferApplied:
                return "an approved support transfer rebinds the lineage; it grants nothing until a verified restore"
            case .transferRequested:
                return "a support operator opened a case and signed its plan; nothing moves until a different approver signs it and it is applied"
            case .transferApproved:
                return "a second staff member signed the same plan; it takes effect only when applied"
            case .transferRefused(let e): return "a safeguard failed, so nothing moved: \(e.reason)"
            default: return "recorded"
            }
        }
        let prior = before.current
        func since(_ seq: UInt64?) -> String { seq.map { " (seq \($0))" } ?? "" }
        switch decision.reason {
        case .bound: return "the lineage was unbound, so the submitting account became its owner" + since(after.boundAt)
        case .refreshed, .notificationExtended:
            let expiry = after.current.entitlement?.expiresAt.map { "; entitlement now runs to \(LedgerTime.format($0))" } ?? ""
            return "the lineage is bound to this account\(since(before.boundAt)), so its entitlement is refreshed\(expiry)"
        case .boundToAnotherAccount:
            if case .bound(let owner) = prior.binding {
                return "the lineage is bound to \(short(owner)) since seq \(before.boundAt.map(String.init) ?? "?"); "
                    + "a restore by another account is denied and moves nothing"
            }
            return DecisionReason.boundToAnotherAccount.message
        case .lineageTombstoned, .tombstonedNotification:
            return "the lineage's owner was deleted (tombstone at seq \(before.tombstonedAt.map(String.init) ?? "?")); "
                + "no account can claim it except through support recovery"
        case .accountDeleted:
            return "the owner deleted their account: the lineage is now a pseudonymous tombstone\(since(after.tombstonedAt))"
                + (after.endedAt.map { " and its entitlement ended (seq \($0))" } ?? "")
        case .transactionExpired:
            return "the verified transaction had already expired at the time of the attempt"
        default: return decision.reason.message
        }
    }

    // MARK: Explain

    /// Why an account is or is not entitled to a lineage at a time.
    public struct Explanation: Sendable {
        public enum Verdict: String, Sendable {
            case entitled
            /// The lineage is bound to another account.
            case denied
            /// The lineage's owner was deleted.
            case tombstoned
            /// A support transfer moved the lineage away from (or to) this account.
            case transferred
            case expired
            case revoked
            /// The entitlement ended early (expiry notice) while the lineage stays bound here.
            case ended
            /// The lineage was seen but never bound (a notification, Family Sharing, a revoked purchase).
            case notBound = "not-bound"
            /// Bound to this account with no entitlement (after a transfer, before a restore).
            case notEntitled = "not-entitled"
            /// The ledger has no record of the lineage up to that time.
            case neverSeen = "never-seen"
        }

        public var verdict: Verdict
        public var entitled: Bool
        /// Plain words, citing sequence numbers.
        public var text: String
        /// The sequence numbers the explanation relies on, ascending.
        public var cited: [UInt64]
        public var state: LineageState
    }

    /// Explains whether `account` (nil: no live account has the UID asked about) is entitled to the
    /// lineage of `records` at `time`.
    public static func explain(records: [Record], lineage: LineageKey, account: AccountID?, at time: Timestamp) -> Explanation {
        var history = History(lineage: lineage)
        for record in records.prefix(throughRecordedAt: time) { history.apply(record) }
        let state = history.current
        let when = LedgerTime.format(time)
        func result(_ verdict: Explanation.Verdict, _ text: String, _ cited: [UInt64?], entitled: Bool = false) -> Explanation {
            Explanation(verdict: verdict, entitled: entitled, text: text, cited: Array(Set(cited.compactMap { $0 })).sorted(), state: state)
        }
        let attempts = history.decisions.filter { $0.decision.account == account && account != nil && $0.decision.reason.outcome == .denied }
        let denials =
            attempts.isEmpty ? "" : " This account's attempts were denied at seq \(attempts.map { String($0.sequence) }.joined(separator: ", "))."
        if records.allSatisfy({ $0.recordedAt > time }) {
            return result(.neverSeen, "The ledger has no record of this subscription lineage up to \(when): it was never submitted.", [])
        }
        let noAccount =
            account == nil
            ? " No live account has this UID (it was never seen, or it was deleted: deletion erases the UID mapping)." : ""
        switch state.binding {
        case .unbound:
            let last = history.decisions.last
            return result(
                .notBound,
                "At \(when) the lineage is not bound to any account, so no account is entitled."
                    + (last.map { " The last decision (seq \($0.sequence)): \($0.decision.reason.message)" } ?? "") + noAccount,
                [last?.sequence])
        case .tombstoned:
            return result(
                .tombstoned,
                "At \(when) the lineage is a tombstone: its owner deleted their account (seq \(history.deletedAt.map(String.init) ?? "?"), "
                    + "tombstone at seq \(history.tombstonedAt.map(String.init) ?? "?")). No account is entitled and no account can claim it "
                    + "except through support recovery." + denials + noAccount,
                [history.deletedAt, history.tombstonedAt] + attempts.map(\.sequence))
        case .bound(let owner):
            guard let account, account == owner else {
                if let account, let moved = history.transfers.last(where: { $0.event.source.account == account }) {
                    return result(
                        .transferred,
                        "At \(when) this account is not entitled: support case \(moved.event.caseId) moved the lineage from this account to "
                            + "\(short(moved.event.target)) at seq \(moved.sequence)." + denials,
                        [moved.sequence] + attempts.map(\.sequence))
                }
                return result(
                    .denied,
                    "At \(when) the lineage is bound to another account (\(short(owner)), bound at seq \(history.boundAt.map(String.init) ?? "?")), "
                        + "so this account is not entitled; a restore from it is denied and moves nothing." + denials + noAccount,
                    [history.boundAt] + attempts.map(\.sequence))
            }
            let transferredIn = history.transfers.last.flatMap { $0.event.target == account ? $0.sequence : nil }
            guard let entitlement = state.entitlement, entitlement.account == account else {
                return result(
                    transferredIn == nil ? .notEntitled : .transferred,
                    "At \(when) the lineage is bound to this account (seq \(history.boundAt.map(String.init) ?? "?"))"
                        + (transferredIn.map { " by support transfer at seq \($0)" } ?? "")
                        + " but holds no entitlement: a verified restore or renewal is needed to grant one.",
                    [history.boundAt])
            }
            let bound = "bound to this account since seq \(history.boundAt.map(String.init) ?? "?")"
            if let revokedAt = entitlement.revokedAt {
                return result(
                    .revoked,
                    "At \(when) the lineage is \(bound), but Apple refunded or revoked it on \(LedgerTime.format(revokedAt)) "
                        + "(recorded at seq \(history.revokedAt.map(String.init) ?? "?")): not entitled.",
                    [history.boundAt, history.revokedAt])
            }
            if let ended = entitlement.endedBecause {
                return result(
                    ended == .expired ? .expired : .ended,
                    "At \(when) the lineage is \(bound), but its entitlement ended (\(ended.name)) at seq "
                        + "\(history.endedAt.map(String.init) ?? "?"): not entitled.",
                    [history.boundAt, history.endedAt])
            }
            if let expiresAt = entitlement.expiresAt, expiresAt <= time {
                return result(
                    .expired,
                    "At \(when) the lineage is \(bound), but the latest verified expiry, \(LedgerTime.format(expiresAt)) "
                        + "(granted at seq \(history.grantedAt.map(String.init) ?? "?")), has passed: not entitled until a renewal is verified.",
                    [history.boundAt, history.grantedAt])
            }
            let expiry = entitlement.expiresAt.map { "until \(LedgerTime.format($0))" } ?? "without expiry"
            return result(
                .entitled,
                "At \(when) this account is entitled to \(entitlement.productId) \(expiry): the lineage is \(bound), and the entitlement "
                    + "was granted or last refreshed at seq \(history.grantedAt.map(String.init) ?? "?") and is neither revoked nor ended.",
                [history.boundAt, history.grantedAt], entitled: true)
        }
    }
}

// MARK: The ledger's forensic queries

extension Ledger {
    /// The lineage's records (see ``Forensics/lineageRecords(_:in:until:)``).
    public func lineageRecords(
        originalTransactionId: String, environment: AppleEnvironment? = nil, until limit: Forensics.Limit? = nil
    ) throws -> (lineage: LineageKey, records: [(record: Record, stored: [UInt8])]) {
        let key = try lineage(originalTransactionId: originalTransactionId, environment: environment)
        return (key, try store.read { try Forensics.lineageRecords(key, in: $0, until: limit) })
    }

    /// The timeline of one lineage, optionally only up to a sequence number or time.
    public func replayLineage(
        originalTransactionId: String, environment: AppleEnvironment? = nil, until limit: Forensics.Limit? = nil
    ) throws -> [Forensics.Step] {
        let (key, records) = try lineageRecords(originalTransactionId: originalTransactionId, environment: environment, until: limit)
        return Forensics.timeline(of: records.map(\.record), lineage: key)
    }

    /// Why the live account `uid` is or is not entitled to the lineage at `at` (now by default).
    public func explain(
        uid: String, originalTransactionId: String, environment: AppleEnvironment? = nil, at: Timestamp? = nil
    ) throws -> Forensics.Explanation {
        let account = try store.read { try $0.pseudonym(ofUID: uid) }
        let (key, records) = try lineageRecords(originalTransactionId: originalTransactionId, environment: environment)
        return Forensics.explain(records: records.map(\.record), lineage: key, account: account, at: at ?? LedgerTime.now())
    }
}
