public import AppleSignedData
public import Foundation
public import LedgerCore
public import LedgerCrypto
import LedgerStore

/// The release evidence the contract asks for: its issue stays open "until the Device A/Device B,
/// same-device account switch, deletion with active Apple billing, non-supported Family Sharing, and
/// support recovery scenarios are retained from the designated StoreKit sandbox/TestFlight build".
///
/// ``Ledger/exportEvidence(environment:since:)`` finds, for each ``Scenario``, the newest instance in
/// the log made only of verified signed Apple data (never `--trust-decoded` facts or legacy receipts)
/// from one environment, recorded at or after a time, and writes them as a bundle: the records with
/// RFC 6962 inclusion proofs against a checkpoint signed at export, each scenario's sequence numbers
/// and one-line explanation, and the scenarios missing. ``verify(_:publicKey:)`` checks the file
/// offline and derives every scenario again from the proven records, by the same rules
/// (``explain(_:_:environment:)``). Records name accounts and lineages only by pseudonym and keyed
/// hash: the file holds no UID and no Apple transaction id.
public enum ReleaseEvidence {
    public static let format = "ownership-ledger-evidence/v1"
    /// The label before the canonical JSON the file's signature covers.
    static let signatureLabel = "ownership-ledger/evidence/v1\n"
    public typealias Failure = DisputeBundle.Failure

    /// A scenario the contract requires evidence of.
    public enum Scenario: String, CaseIterable, Sendable {
        case deviceADeviceB = "device-a-device-b"
        case accountSwitch = "same-device-account-switch"
        case deletionWithActiveBilling = "deletion-with-active-billing"
        case familySharing = "family-sharing-not-supported"
        case supportRecovery = "support-recovery"

        /// The contract's name for it.
        public var title: String {
            switch self {
            case .deviceADeviceB: "Device A / Device B"
            case .accountSwitch: "same-device account switch"
            case .deletionWithActiveBilling: "deletion with active Apple billing"
            case .familySharing: "Family Sharing not supported"
            case .supportRecovery: "support recovery"
            }
        }

        /// What an instance shows, and so what a missing one needs.
        public var requirement: String {
            switch self {
            case .deviceADeviceB: "a purchase, then a restore of the same lineage by the same account, both granted"
            case .accountSwitch: "a restore by another account denied, with the binding unmoved"
            case .deletionWithActiveBilling:
                "a deletion while entitled, then a later renewal (notification or transaction) purchased after it that granted nobody"
            case .familySharing: "a family-shared transaction or notification refused"
            case .supportRecovery: "an approved and applied transfer, then the target account's verified restore, granted"
            }
        }
    }

    /// What the file says of a scenario it did not find: what an instance needs, from verified signed
    /// data of `environment` (`evidence verify` requires exactly this text).
    public static func missingExplanation(_ scenario: Scenario, environment: String) -> String {
        "missing: needs \(scenario.requirement), from verified signed \(environment) data"
    }

    /// One scenario's instance: the sequence numbers of its records, ascending, and what they show.
    public struct Instance: Equatable, Sendable {
        public var scenario: Scenario
        public var sequences: [UInt64]
        public var explanation: String
    }

    /// What an export found and wrote.
    public struct Export: Sendable {
        /// The file: canonical JSON and a newline.
        public var data: Data
        public var instances: [Instance]
        public var missing: [Scenario]
        public var checkpointSize: UInt64
        public var complete: Bool { missing.isEmpty }
    }

    /// What a verified file proves.
    public struct Verified: Sendable {
        public var origin: String
        public var checkpointSize: UInt64
        public var environment: String
        public var since: Timestamp?
        /// Every instance, its explanation derived again from the proven records.
        public var instances: [Instance]
        public var missing: [Scenario]
        public var complete: Bool { missing.isEmpty }
    }

    // MARK: The rules

    /// Checks that `records` (ascending) are an instance of `scenario` made of verified signed data
    /// from `environment`, and says what they show in one line; throws ``Failure`` naming what does
    /// not hold. Every record carrying Apple facts must carry verified JWS facts from `environment`.
    public static func explain(_ scenario: Scenario, _ records: [Record], environment: String) throws -> String {
        for record in records { try checkFacts(record, environment: environment) }
        guard zip(records, records.dropFirst()).allSatisfy({ $0.sequence < $1.sequence }) else {
            throw Failure("\(scenario.rawValue): the records are not in log order")
        }
        func fail(_ reason: String) -> Failure { Failure("\(scenario.rawValue): \(reason)") }
        switch scenario {
        case .deviceADeviceB:
            guard records.count == 2, let purchase = submission(records[0], kind: .purchase),
                let restore = submission(records[1], kind: .restore), let account = purchase.account
            else { throw fail("expected a purchase and a restore") }
            guard restore.account == account, restore.lineage == purchase.lineage else {
                throw fail("the restore is not of the purchased lineage by the same account")
            }
            guard granted(records[0], purchase.lineage, account), granted(records[1], purchase.lineage, account) else {
                throw fail("the purchase and the restore were not both granted to the account")
            }
            return "\(short(account)) purchased lineage \(short(purchase.lineage)) (seq \(records[0].sequence), granted) and restored the "
                + "same purchase with the same account, as on a second device (seq \(records[1].sequence), granted): "
                + "device identity is not an entitlement input"
        case .accountSwitch:
            guard records.count == 2, let bound = boundAccount(records[0]), let restore = submission(records[1], kind: .restore),
                let other = restore.account
            else { throw fail("expected the record that bound the lineage and a restore") }
            guard bound.lineage == restore.lineage, other != bound.account else {
                throw fail("the restore is not of the bound lineage by another account")
            }
            guard records[1].decision?.reason == .boundToAnotherAccount, !changesOwnership(records[1]) else {
                throw fail("the restore was not denied permission-denied with nothing moved or granted")
            }
            return "lineage \(short(bound.lineage)) was bound to \(short(bound.account)) (seq \(records[0].sequence)); a restore by "
                + "\(short(other)) was denied permission-denied and moved nothing (seq \(records[1].sequence))"
        case .deletionWithActiveBilling:
            guard records.count == 3, let grant = grantedEntitlement(records[0]),
                case .accountDeletionRequested(let deleted)? = records[1].events.first
            else { throw fail("expected a grant, a deletion and a renewal") }
            let (lineage, deletion) = (grant.lineage, records[1])
            guard deleted == grant.account,
                deletion.events.contains(.entitlementEnded(lineage: lineage, account: deleted, reason: .accountDeleted)),
                deletion.events.contains(.lineageTombstoned(lineage: lineage, formerAccount: deleted))
            else { throw fail("the deletion did not end the granted account's entitlement and tombstone the lineage") }
            guard let expires = grant.expiresAt, deletion.at < expires else {
                throw fail("the account was not entitled when it was deleted (its entitlement had expired)")
            }
            guard let renewal = appleFacts(records[2]), renewal.lineage == lineage, renewal.facts.purchaseDate > deletion.at else {
                throw fail("the last record is not a transaction of the lineage purchased after the deletion")
            }
            guard records[2].decision?.reason.outcome != .granted, !changesOwnership(records[2]) else {
                throw fail("the renewal after the deletion granted or bound something")
            }
            return "\(short(deleted)) was entitled to lineage \(short(lineage)) until \(LedgerTime.format(expires)) (seq "
                + "\(records[0].sequence)) and deleted at \(LedgerTime.format(deletion.at)) (seq \(deletion.sequence): tombstoned, "
                + "entitlement ended, Apple billing continues); then \(renewal.what) for a transaction purchased "
                + "\(LedgerTime.format(renewal.facts.purchaseDate)) granted nobody (seq \(records[2].sequence), \(records[2].decision?.reason.code ?? "no decision"))"
        case .familySharing:
            guard records.count == 1, let shared = appleFacts(records[0]), shared.facts.ownership == .familyShared else {
                throw fail("expected one FAMILY_SHARED transaction or notification")
            }
            guard records[0].decision?.reason == .familyShared, !changesOwnership(records[0]) else {
                throw fail("the family-shared transaction was not refused family-sharing-unsupported")
            }
            return "\(shared.what) with inAppOwnershipType FAMILY_SHARED was refused family-sharing-unsupported and bound or granted "
                + "nothing (seq \(records[0].sequence))"
        case .supportRecovery:
            guard records.count == 4, case .transferRequested(let request)? = records[0].events.first,
                case .transferApproved(let approval)? = records[1].events.first,
                let applied = records[2].events.compactMap({ event -> TransferApplied? in
                    if case .transferApplied(let e) = event { e } else { nil }
                }).first,
                let restore = submission(records[3], kind: .restore)
            else { throw fail("expected a request, an approval, an apply and a restore") }
            let plan = request.plan
            guard try Ledger.digest(of: plan) == request.planDigest else { throw fail("the plan digest is not the plan's SHA-256") }
            guard approval.caseId == plan.caseId, applied.caseId == plan.caseId, approval.planDigest == request.planDigest,
                applied.planDigest == request.planDigest
            else { throw fail("the approval and the apply are not of the requested plan") }
            guard approval.approvedBy != request.requestedBy else { throw fail("the operator approved their own request") }
            guard applied.lineage == plan.lineage, applied.target == plan.target, !records[2].events.contains(where: isGrant) else {
                throw fail("the apply moved another lineage, or to another account, or granted")
            }
            guard restore.account == plan.target, restore.lineage == plan.lineage, granted(records[3], plan.lineage, plan.target) else {
                throw fail("the target account's restore of the lineage was not granted")
            }
            return "case \(plan.caseId): \(request.requestedBy) requested moving lineage \(short(plan.lineage)) to \(short(plan.target)) "
                + "(seq \(records[0].sequence)), \(approval.approvedBy) approved the same plan \(request.planDigest.hex.prefix(12))… "
                + "(seq \(records[1].sequence)), \(applied.appliedBy) applied it, granting nothing (seq \(records[2].sequence)); the "
                + "target's verified restore was granted (seq \(records[3].sequence))"
        }
    }

    /// Refuses a record whose Apple facts are not verified JWS facts from `environment`.
    static func checkFacts(_ record: Record, environment: String) throws {
        guard let facts = appleFacts(record)?.facts else { return }
        guard facts.provenance == .verifiedJWS else {
            throw Failure(
                "record \(record.sequence): its transaction is \(facts.provenance == .trustedDecoded ? "trusted-decoded facts" : "a legacy receipt"), "
                    + "not verified signed data")
        }
        guard facts.environment.utf8.elementsEqual(environment.utf8) else {
            throw Failure("record \(record.sequence): its transaction is from \(facts.environment), not \(environment)")
        }
    }

    /// The Apple transaction a record's fact carries, with the lineage and a few words naming the fact.
    static func appleFacts(_ record: Record) -> (lineage: LineageKey, facts: TransactionFacts, what: String)? {
        switch record.events.first {
        case .transactionSubmitted(let e)?: (e.lineage, e.transaction, "a \(e.kind.name) transaction")
        case .notificationReceived(let e)?:
            e.lineage.flatMap { lineage in e.transaction.map { (lineage, $0, "a \(e.notificationType) notification") } }
        default: nil
        }
    }

    static func submission(_ record: Record, kind: SubmissionKind) -> TransactionSubmitted? {
        guard case .transactionSubmitted(let e)? = record.events.first, e.kind == kind else { return nil }
        return e
    }

    /// The record granted `account` an entitlement on `lineage` and decided granted.
    static func granted(_ record: Record, _ lineage: LineageKey, _ account: AccountID) -> Bool {
        record.decision?.reason.outcome == .granted
            && record.events.contains {
                if case .entitlementGranted(let e) = $0 { e.lineage == lineage && e.account == account } else { false }
            }
    }

    /// The lineage and account a verified submission's record bound.
    static func boundAccount(_ record: Record) -> (lineage: LineageKey, account: AccountID)? {
        guard case .transactionSubmitted? = record.events.first else { return nil }
        for case .lineageBound(let lineage, let account) in record.events { return (lineage, account) }
        return nil
    }

    /// The entitlement a submission's or notification's record granted.
    static func grantedEntitlement(_ record: Record) -> EntitlementGranted? {
        guard appleFacts(record) != nil else { return nil }
        for case .entitlementGranted(let e) in record.events { return e }
        return nil
    }

    static func isGrant(_ event: LedgerEvent) -> Bool {
        if case .entitlementGranted = event { true } else { false }
    }

    /// Whether the record binds, grants or moves anything.
    static func changesOwnership(_ record: Record) -> Bool {
        record.events.contains {
            switch $0 {
            case .lineageBound, .entitlementGranted, .transferApplied, .entitlementReinstated: true
            default: false
            }
        }
    }

    static func short(_ account: AccountID) -> String { "account \(account.shortDescription)" }
    static func short(_ lineage: LineageKey) -> String { "\(lineage.description.prefix(8))…" }

    // MARK: Finding instances

    /// One pass over the records of the window, in order: for each scenario, the newest instance the
    /// rules accept (a candidate the rules refuse is skipped).
    struct Finder {
        let environment: String
        var found: [Scenario: Instance] = [:]
        /// Per lineage: its latest verified purchase granted (seq, account); the record that bound it.
        private var purchases: [LineageKey: Record] = [:]
        private var bindings: [LineageKey: Record] = [:]
        /// Per lineage: its latest verified grant.
        private var grants: [LineageKey: Record] = [:]
        /// Per lineage: the grant and the deletion that tombstoned it while entitled.
        private var deletions: [LineageKey: (grant: Record, deletion: Record)] = [:]
        /// Transfer steps by case, and applied transfers by lineage.
        private var requests: [String: Record] = [:]
        private var approvals: [String: Record] = [:]
        private var transfers: [LineageKey: (request: Record, approval: Record, apply: Record)] = [:]

        init(environment: String) { self.environment = environment }

        mutating func add(_ record: Record) throws {
            let verified = (try? checkFacts(record, environment: environment)) != nil
            if verified, let facts = ReleaseEvidence.appleFacts(record) {
                let lineage = facts.lineage
                if facts.facts.ownership == .familyShared { try offer(.familySharing, [record]) }
                if let grant = grantedEntitlement(record), grant.lineage == lineage { grants[lineage] = record }
                if let deleted = deletions[lineage], record.sequence > deleted.deletion.sequence {
                    try offer(.deletionWithActiveBilling, [deleted.grant, deleted.deletion, record])
                }
                if let restore = submission(record, kind: .restore) {
                    if let purchase = purchases[lineage] { try offer(.deviceADeviceB, [purchase, record]) }
                    if let binding = bindings[lineage], restore.account != boundAccount(binding)?.account {
                        try offer(.accountSwitch, [binding, record])
                    }
                    if let transfer = transfers[lineage] {
                        try offer(.supportRecovery, [transfer.request, transfer.approval, transfer.apply, record])
                    }
                }
                if let purchase = submission(record, kind: .purchase), let account = purchase.account,
                    ReleaseEvidence.granted(record, lineage, account)
                {
                    purchases[lineage] = record
                }
                if boundAccount(record)?.lineage == lineage { bindings[lineage] = record }
            }
            for event in record.events {
                switch event {
                case .lineageTombstoned(let lineage, _):
                    (purchases[lineage], bindings[lineage]) = (nil, nil)
                    if let grant = grants[lineage] { deletions[lineage] = (grant, record) }
                case .transferRequested(let e): requests[e.plan.caseId] = record
                case .transferApproved(let e): approvals[e.caseId] = record
                case .transferApplied(let e):
                    (purchases[e.lineage], bindings[e.lineage], grants[e.lineage]) = (nil, nil, nil)
                    if let request = requests[e.caseId], let approval = approvals[e.caseId] {
                        transfers[e.lineage] = (request, approval, record)
                    }
                default: break
                }
            }
        }

        /// Keeps `records` as the scenario's newest instance when the rules accept them.
        private mutating func offer(_ scenario: Scenario, _ records: [Record]) throws {
            do {
                let explanation = try explain(scenario, records, environment: environment)
                found[scenario] = Instance(scenario: scenario, sequences: records.map(\.sequence), explanation: explanation)
            } catch is Failure {
                return
            }
        }
    }
}

extension Ledger {
    /// Finds the newest instance of every ``ReleaseEvidence/Scenario`` among the records recorded at
    /// or after `since` (all when nil), made of verified signed data from `environment` (the ledger's
    /// by default), and writes them as a signed evidence file (``ReleaseEvidence``): a checkpoint signed
    /// now, each instance's records with inclusion proofs, each scenario's sequence numbers and
    /// explanation, the scenarios missing.
    /// - Complexity: O(records recorded since `since`) decoded once, plus O(log n) per record proven.
    public func exportEvidence(environment: AppleEnvironment? = nil, since: Timestamp? = nil) throws -> ReleaseEvidence.Export {
        let key = try signer()
        let environment = (environment ?? configuration.environment).rawValue
        let hasher = try LogHasher()
        // One snapshot: the checkpoint, the records and their proofs all describe the same log.
        let (text, checkpoint, finder, entries) = try store.read { reader in
            let (text, checkpoint) = try Self.checkpoint(of: reader, key: key)
            let first = try since.map { try reader.lastSequence(recordedAtOrBefore: $0 - 1) + 1 } ?? 1
            var finder = ReleaseEvidence.Finder(environment: environment)
            try reader.forEachRecord(from: first, through: checkpoint.size) { sequence, bytes in
                try finder.add(try RecordCodec.decode(bytes, sequence: sequence))
                return true
            }
            let sequences = Set(finder.found.values.flatMap(\.sequences)).sorted()
            let entries: [[String: Any]] = try sequences.map { sequence in
                guard let stored = try reader.record(sequence) else { throw LedgerStoreError.corrupt("record \(sequence) is missing from the log") }
                return try SignedBundle.entry(
                    try RecordCodec.decode(stored, sequence: sequence), stored: stored, size: checkpoint.size, reader: reader, hasher: hasher)
            }
            return (text, checkpoint, finder, entries)
        }
        let instances = ReleaseEvidence.Scenario.allCases.compactMap { finder.found[$0] }
        let missing = ReleaseEvidence.Scenario.allCases.filter { finder.found[$0] == nil }
        let body: [String: Any] = [
            "format": ReleaseEvidence.format, "checkpoint": text, "publicKey": key.publicKey.pem, "environment": environment,
            "since": since.map { LedgerTime.format($0) as Any } ?? NSNull(), "exportedAt": LedgerTime.format(clock()), "records": entries,
            "scenarios": ReleaseEvidence.Scenario.allCases.map { scenario -> [String: Any] in
                let instance = finder.found[scenario]
                return [
                    "scenario": scenario.rawValue, "title": scenario.title, "found": instance != nil, "seqs": instance?.sequences ?? [],
                    "explanation": instance?.explanation ?? ReleaseEvidence.missingExplanation(scenario, environment: environment),
                ]
            },
            "missing": missing.map(\.rawValue), "complete": missing.isEmpty,
        ]
        let data = try SignedBundle.seal(body, label: ReleaseEvidence.signatureLabel, signer: key)
        return ReleaseEvidence.Export(data: data, instances: instances, missing: missing, checkpointSize: checkpoint.size)
    }
}

extension ReleaseEvidence {
    /// Verifies an evidence file offline against the trusted `publicKey`: its canonical form and
    /// signature, the checkpoint's signature, every record's inclusion proof, decoding and decoded
    /// JSON; then derives every scenario again from the proven records by ``explain(_:_:environment:)``
    /// (which must give the file's explanation; a missing scenario's must be ``missingExplanation(_:environment:)``,
    /// and every title the scenario's), checks every record is recorded at or after `since`
    /// and belongs to a scenario, and that the missing scenarios are exactly those not found. Throws
    /// ``Failure`` when anything does not hold, ``CryptoError`` when libcrypto fails.
    public static func verify(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        try SignedBundle.verifying { try verifyThrowing(data, publicKey: publicKey) }
    }

    private static func verifyThrowing(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        let (body, checkpoint, origin) = try SignedBundle.open(data, publicKey: publicKey, labels: [format: signatureLabel])
        guard let environment = body["environment"] as? String else { throw Failure("environment is missing") }
        var since: Timestamp?
        if let text = body["since"] as? String {
            guard let time = LedgerTime.parse(text) else { throw Failure("since is not a time") }
            since = time
        } else if !(body["since"] is NSNull) {
            throw Failure("since is missing")
        }
        guard let entries = body["records"] as? [[String: Any]], let claims = body["scenarios"] as? [[String: Any]] else {
            throw Failure("records or scenarios are missing")
        }
        var records: [UInt64: Record] = [:]
        var last: UInt64 = 0
        for (position, entry) in entries.enumerated() {
            let seq = try SignedBundle.sequence(entry, position: position, after: last, checkpoint: checkpoint)
            last = seq
            let record = try SignedBundle.record(entry, seq: seq, checkpoint: checkpoint)
            if let since, record.recordedAt < since { throw Failure("record \(seq) was recorded before since") }
            records[seq] = record
        }
        guard claims.compactMap({ $0["scenario"] as? String }) == Scenario.allCases.map(\.rawValue) else {
            throw Failure("scenarios must list \(Scenario.allCases.map(\.rawValue).joined(separator: ", ")) in that order")
        }
        var instances: [Instance] = []
        var missing: [Scenario] = []
        var used = Set<UInt64>()
        for (scenario, claim) in zip(Scenario.allCases, claims) {
            guard let found = claim["found"] as? Bool, let seqs = (claim["seqs"] as? [NSNumber])?.map(\.uint64Value),
                let explanation = claim["explanation"] as? String
            else { throw Failure("\(scenario.rawValue): found, seqs or explanation is missing") }
            guard claim["title"] as? String == scenario.title else { throw Failure("\(scenario.rawValue): the title is not \"\(scenario.title)\"") }
            guard found else {
                guard seqs.isEmpty else { throw Failure("\(scenario.rawValue): a missing scenario lists records") }
                guard explanation == missingExplanation(scenario, environment: environment) else {
                    throw Failure("\(scenario.rawValue): the explanation of a missing scenario is not what it needs")
                }
                missing.append(scenario)
                continue
            }
            let instance = try seqs.map { seq -> Record in
                guard let record = records[seq] else { throw Failure("\(scenario.rawValue): record \(seq) is not in the file") }
                return record
            }
            let derived = try explain(scenario, instance, environment: environment)
            guard derived == explanation else { throw Failure("\(scenario.rawValue): the explanation is not what the records show") }
            used.formUnion(seqs)
            instances.append(Instance(scenario: scenario, sequences: seqs, explanation: derived))
        }
        guard used == Set(records.keys) else { throw Failure("the file holds records no scenario uses") }
        guard body["missing"] as? [String] == missing.map(\.rawValue), body["complete"] as? Bool == missing.isEmpty else {
            throw Failure("missing and complete do not match the scenarios")
        }
        return Verified(
            origin: origin, checkpointSize: checkpoint.size, environment: environment, since: since, instances: instances, missing: missing)
    }
}
