public import AppleSignedData
import Foundation
public import LedgerCore
import LedgerCrypto
import LedgerStore
import Projections

/// Forensic replay: a lineage's history step by step, and why an account is or is not entitled.
/// Everything here is computed from the records alone (the persisted read models are not read), so
/// the same functions serve the live store and an offline dispute bundle.
///
/// Every point in time means one thing: what the ledger knew then, that is the records recorded
/// (by the ledger's clock) at or before it. `recordedAt` never goes backwards, so that is a prefix of
/// the log, found by binary search; entitlements are then judged active or not at that time.
public enum Forensics {
    /// Where a replay stops: after a sequence number, or after a time (inclusive, on `recordedAt`).
    public enum Limit: Equatable, Sendable {
        case sequence(UInt64)
        case time(Timestamp)

        /// The last sequence this limit keeps.
        func cut(_ reader: any EngineReader) throws -> UInt64 {
            switch self {
            case .sequence(let last): last
            case .time(let time): try reader.lastSequence(recordedAtOrBefore: time)
            }
        }
    }

    /// One step of a lineage's history: a record (a submission's fact, effects on this lineage and
    /// decision; or a support step) and the lineage's state after it.
    public struct Step: Sendable {
        /// The sequence numbers of the step (one record; several for a format-1 batch).
        public var sequences: [UInt64]
        /// When the ledger recorded it.
        public var recordedAt: Timestamp
        /// The business time of the attempt (what the decision judged expiry by).
        public var at: Timestamp
        /// The name of the first event (`transaction-submitted`, `account-deletion-requested`, …).
        public var event: String
        /// What happened, in words.
        public var what: String
        /// The decision recorded, when the step has one.
        public var decision: DecisionReason?
        /// The sequence number of the decision.
        public var decisionSequence: UInt64?
        /// Why the ledger decided as it did, in words, citing earlier sequence numbers.
        public var why: String
        /// The effects on this lineage, as `name@seq`.
        public var effects: [String]
        /// The lineage's state after the step.
        public var state: LineageState
        /// Whether the entitlement was active at the step's business time.
        public var entitledAfter: Bool

        public var firstSequence: UInt64 { sequences.first ?? 0 }
    }

    /// Is `event` decided by the ledger (as opposed to the fact that starts a record)?
    static func isEffect(_ event: LedgerEvent) -> Bool {
        switch event {
        case .lineageBound, .entitlementGranted, .entitlementEnded, .entitlementRevoked, .entitlementReinstated,
            .lineageTombstoned, .accountDeleted, .decisionIssued:
            true
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .staffEnrolled, .staffRemoved,
            .transferRequested, .transferApproved, .transferApplied, .transferRefused, .storeUpgraded, .rosterChangeProposed:
            false
        }
    }

    /// Whether `event` may appear in `lineage`'s history: it names the lineage, or names no lineage.
    static func concerns(_ event: LedgerEvent, lineage: LineageKey) -> Bool {
        event.lineage == nil || event.lineage == lineage
    }

    /// The records of `lineage`'s history through `limit`, in order: every record the lineage index
    /// lists (each names the lineage, or is a step of a transfer case of it), with its stored bytes.
    ///
    /// The lineage's records through the head are replayed and compared with its persisted state
    /// first: a mismatch means a damaged index, refused rather than told (or signed).
    /// - Complexity: O(log n + records of the lineage).
    public static func lineageRecords(
        _ lineage: LineageKey, in reader: any EngineReader, until limit: Limit? = nil
    ) throws -> [(record: Record, stored: [UInt8])] {
        let head = try reader.head().sequence
        var out: [(record: Record, stored: [UInt8])] = []
        for sequence in try reader.sequences(ofLineage: lineage, through: head) {
            guard let stored = try reader.record(sequence) else { throw LedgerStoreError.corrupt("record \(sequence) is missing from the log") }
            out.append((try RecordCodec.decode(stored, sequence: sequence), stored))
        }
        var replayed = LedgerState()
        for entry in out {
            for event in entry.record.events where concerns(event, lineage: lineage) { StateProjection.evolve(&replayed, event) }
        }
        let persisted = try reader.lineageStates([lineage])[lineage] ?? LineageState()
        guard replayed.lineage(lineage) == persisted else {
            throw LedgerStoreError.corrupt(
                "the lineage index disagrees with the persisted state of lineage \(lineage): run `ledger verify`, then `ledger rebuild` to repair the indexes"
            )
        }
        guard let limit else { return out }
        let cut = try limit.cut(reader)
        return out.filter { $0.record.sequence <= cut }
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
            for event in record.events { apply(event, sequence: record.sequence) }
        }

        mutating func apply(_ event: LedgerEvent, sequence seq: UInt64) {
            guard concerns(event, lineage: lineage) else { return }
            switch event {
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
            StateProjection.evolve(&state, event)
        }
    }

    /// The timeline of `records` (a lineage's records in order, as ``lineageRecords(_:in:until:)``
    /// gives them): one step per record, with the state after each. `eventSequences` gives, for a
    /// record that stands for a format-1 batch, the sequence number of each of its events.
    public static func timeline(of records: [Record], lineage: LineageKey, eventSequences: [[UInt64]]? = nil) -> [Step] {
        var history = History(lineage: lineage)
        var steps: [Step] = []
        for (position, record) in records.enumerated() {
            let sequences = eventSequences?[position] ?? Array(repeating: record.sequence, count: record.events.count)
            let before = history
            for (event, sequence) in zip(record.events, sequences) { history.apply(event, sequence: sequence) }
            steps.append(step(record, sequences: sequences, lineage: lineage, before: before, after: history))
        }
        return steps
    }

    static func step(_ record: Record, sequences: [UInt64], lineage: LineageKey, before: History, after: History) -> Step {
        let events = Array(zip(record.events, sequences))
        let first = events.first { if case .transferApplied = $0.0 { return true } else { return false } } ?? events[0]
        var decision: DecisionIssued?
        var decisionSequence: UInt64?
        var effects: [String] = []
        let firstOffset = events.firstIndex { $0.0 == first.0 && $0.1 == first.1 } ?? 0
        for (offset, (event, sequence)) in events.enumerated() where offset != firstOffset && concerns(event, lineage: lineage) {
            if case .decisionIssued(let d) = event {
                decision = d
                decisionSequence = sequence
            } else {
                effects.append("\(event.name)@\(sequence)")
            }
        }
        let state = after.current
        var unique: [UInt64] = []
        for sequence in sequences where unique.last != sequence { unique.append(sequence) }
        return Step(
            sequences: unique, recordedAt: record.recordedAt, at: record.at, event: first.0.name, what: describe(first.0),
            decision: decision?.reason, decisionSequence: decisionSequence,
            why: why(first.0, decision: decision, before: before, after: after), effects: effects, state: state,
            entitledAfter: state.activeEntitlement(at: record.at) != nil)
    }

    static func short(_ account: AccountID) -> String { "account \(account.shortDescription)" }

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
    /// lineage at `time`, given the lineage's records the ledger knew at `time` (recorded at or before it).
    public static func explain(records: [Record], lineage: LineageKey, account: AccountID?, at time: Timestamp) -> Explanation {
        var history = History(lineage: lineage)
        for record in records { history.apply(record) }
        let state = history.current
        let when = LedgerTime.format(time)
        func result(_ verdict: Explanation.Verdict, _ text: String, _ cited: [UInt64?], entitled: Bool = false) -> Explanation {
            Explanation(verdict: verdict, entitled: entitled, text: text, cited: Array(Set(cited.compactMap { $0 })).sorted(), state: state)
        }
        let attempts = history.decisions.filter { $0.decision.account == account && account != nil && $0.decision.reason.outcome == .denied }
        let denials =
            attempts.isEmpty ? "" : " This account's attempts were denied at seq \(attempts.map { String($0.sequence) }.joined(separator: ", "))."
        if records.isEmpty {
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
            guard let entitlement = state.visibleEntitlement, entitlement.account == account else {
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

    /// The timeline of one lineage, optionally only up to a sequence number or a time.
    public func replayLineage(
        originalTransactionId: String, environment: AppleEnvironment? = nil, until limit: Forensics.Limit? = nil
    ) throws -> [Forensics.Step] {
        let (key, records) = try lineageRecords(originalTransactionId: originalTransactionId, environment: environment, until: limit)
        return Forensics.timeline(of: records.map(\.record), lineage: key)
    }

    /// Why the live account `uid` is or is not entitled to the lineage at `at`, from the records the
    /// ledger knew at `at`; without `at`, from every record, entitled or not now (as `binding` and
    /// `account` answer: a record whose `recordedAt` is ahead of the clock, after a clock fault, counts).
    public func explain(
        uid: String, originalTransactionId: String, environment: AppleEnvironment? = nil, at: Timestamp? = nil
    ) throws -> Forensics.Explanation {
        let time = at ?? clock()
        let account = try store.read { try store.pseudonym(ofUID: uid, in: $0) }
        let (key, records) = try lineageRecords(
            originalTransactionId: originalTransactionId, environment: environment, until: at.map { .time($0) })
        return Forensics.explain(records: records.map(\.record), lineage: key, account: account, at: time)
    }
}
