public import AppleSignedData
public import LedgerCore
public import LedgerCrypto
import LedgerStore
public import Projections

/// What a support step did (or, for a dry run, would do).
public struct SupportOutcome: Sendable {
    /// `enroll`, `remove`, `request`, `approve`, `dry-run` or `apply`.
    public var step: String
    public var caseId: String?
    /// The plan of the case, when there is one.
    public var plan: TransferPlan?
    public var planDigest: Digest32?
    public var requestedBy: StaffID?
    public var approvedBy: StaffID?
    /// The live UID of the plan's source account (nil once deleted) and of its target.
    public var sourceUID: String?
    public var targetUID: String?
    /// Every safeguard and its result.
    public var checks: [TransferDecider.Check]
    /// The events appended (for a dry run: none).
    public var appended: [LedgerEvent]
    /// Their sequence numbers.
    public var sequences: [UInt64]
    /// For a transfer: the events applying it appends (or appended): ending the previous account's
    /// live entitlement, then the rebinding. Never a grant.
    public var effects: [LedgerEvent]

    /// Every safeguard holds.
    public var accepted: Bool { checks.allSatisfy(\.passed) }

    /// Why the step was refused, when it was.
    public var refusalReason: String? {
        let failed = checks.filter { !$0.passed }
        return failed.isEmpty ? nil : failed.map { "\($0.name): \($0.detail)" }.joined(separator: "; ")
    }
}

/// A transfer request as the operator enters it.
public struct TransferRequestInput: Sendable {
    public var caseId: String
    /// Private: shown to staff, never to customers.
    public var reason: String
    public var originalTransactionId: String
    /// The ledger's environment when nil.
    public var environment: AppleEnvironment?
    /// The replacement account's Firebase UID.
    public var targetUID: String
    /// How the target account's owner was authenticated.
    public var targetAuthentication: String
    /// Corroborating store-ownership evidence.
    public var ownershipEvidence: String

    public init(
        caseId: String, reason: String, originalTransactionId: String, environment: AppleEnvironment? = nil, targetUID: String,
        targetAuthentication: String, ownershipEvidence: String
    ) {
        self.caseId = caseId
        self.reason = reason
        self.originalTransactionId = originalTransactionId
        self.environment = environment
        self.targetUID = targetUID
        self.targetAuthentication = targetAuthentication
        self.ownershipEvidence = ownershipEvidence
    }
}

/// A support action refused before anything was recorded (a roster change that does not authenticate).
public struct SupportRefusal: Error, CustomStringConvertible, Sendable {
    public var outcome: SupportOutcome
    public var description: String { "\(outcome.step) refused: \(outcome.refusalReason ?? "unknown")" }
}

/// A support input refused before anything was recorded: a malformed case or staff id, or a
/// free-text field of a transfer request that holds a customer identifier.
public struct SupportInputError: Error, CustomStringConvertible, Equatable, Sendable {
    /// The input at fault.
    public enum Field: String, Sendable {
        case caseId = "case id"
        case staff = "staff id"
        case administrator = "administrator staff id"
        case operator_ = "operator staff id"
        case approver = "approver staff id"
        case reason = "reason"
        case targetAuthentication = "target authentication"
        case ownershipEvidence = "ownership evidence"
    }

    public var field: Field
    /// What is wrong with it, as a sentence fragment following the field's name.
    public var problem: String

    public init(field: Field, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "the \(field.rawValue) \(problem)" }
}

/// One audit entry with its signature checked again against the roster as it was at that point.
public struct AuditRecord: Sendable {
    public var entry: AuditEntry
    /// Who signed (the administrator, operator or approver), for signed support events.
    public var signer: StaffID?
    /// `valid`, `invalid`, `unsigned-first-administrator` (set by `init`), or nil for unsigned entries.
    public var signature: String?
}

extension Ledger {
    // MARK: Roster

    /// Enrols the first roster administrator (what `ledger init --admin` does). Refused once the roster
    /// has anyone in it: every later change is signed by an administrator.
    public func enrollFirstAdministrator(_ staff: StaffID, publicKey: Ed25519PublicKey, at: Timestamp? = nil) throws {
        try Self.checkIdentifier(staff, field: .administrator)
        try supportStep { group in
            try group.load(staff: true)
            guard group.state.staff.isEmpty else {
                throw SupportRefusal(
                    outcome: outcome(
                        "enroll",
                        checks: [
                            TransferDecider.Check(
                                name: "roster-empty", passed: false, detail: "the roster already has members; ask an administrator")
                        ]))
            }
            let event = LedgerEvent.staffEnrolled(
                StaffEnrolled(
                    staff: staff, roles: .administrator, publicKey: publicKey.rawRepresentation, ownAccount: nil, enrolledBy: nil,
                    signature: []))
            _ = try commit([event], step: "enroll|\(staff)", at: at, in: &group)
        }
    }

    /// An administrator enrols a staff member; the administrator's key signs the enrolment.
    /// Throws ``SupportRefusal`` (appending nothing) when a safeguard fails.
    public func enrollStaff(
        _ staff: StaffID, roles: StaffRoles, publicKey: Ed25519PublicKey, ownAccountUID: String?, administrator: StaffID,
        administratorKey: Ed25519PrivateKey, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(staff, field: .staff)
        try Self.checkIdentifier(administrator, field: .administrator)
        return try supportStep { group in
            let ownAccount = try ownAccountUID.map { try group.pseudonym(forUID: $0) }
            var enrolment = StaffEnrolled(
                staff: staff, roles: roles, publicKey: publicKey.rawRepresentation, ownAccount: ownAccount,
                enrolledBy: administrator, signature: [])
            enrolment.signature = try administratorKey.sign(enrolment.signedMessage)
            return try changeRoster(
                "enroll", staff: staff, administrator: administrator, signature: enrolment.signature,
                message: enrolment.signedMessage, at: at, group: &group
            ) { valid, state in TransferDecider.enroll(enrolment, signatureValid: valid, state: state) }
        }
    }

    /// An administrator removes a staff member, who can no longer request, approve or apply.
    public func removeStaff(
        _ staff: StaffID, administrator: StaffID, administratorKey: Ed25519PrivateKey, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(staff, field: .staff)
        try Self.checkIdentifier(administrator, field: .administrator)
        return try supportStep { group in
            var removal = StaffRemoved(staff: staff, removedBy: administrator, signature: [])
            removal.signature = try administratorKey.sign(removal.signedMessage)
            return try changeRoster(
                "remove", staff: staff, administrator: administrator, signature: removal.signature, message: removal.signedMessage,
                at: at, group: &group
            ) { valid, state in TransferDecider.remove(removal, signatureValid: valid, state: state) }
        }
    }

    /// A signed roster change: checks the administrator's signature against the roster, decides,
    /// and appends, or throws ``SupportRefusal`` recording nothing.
    private func changeRoster(
        _ step: String, staff: StaffID, administrator: StaffID, signature: [UInt8], message: [UInt8], at: Timestamp?,
        group: inout WriteGroup, decide: (_ signatureValid: Bool, _ state: LedgerState) -> TransferDecider.Outcome
    ) throws -> SupportOutcome {
        try group.load(staff: true)
        let state = group.state
        let decided = decide(try Self.verifies(signature, message, key: state.staff[administrator]?.publicKey), state)
        var result = outcome(step, checks: decided.checks)
        guard decided.accepted else { throw SupportRefusal(outcome: result) }
        (result.appended, result.sequences) = try commit(decided.events, step: "\(step)|\(staff)", at: at, in: &group)
        return result
    }

    // MARK: Transfer steps

    /// The operator opens a transfer: computes the plan and its digest, signs the digest with `key`,
    /// and appends `transferRequested`, or only a `transferRefused` record when a safeguard fails.
    ///
    /// Throws ``SupportInputError`` (recording nothing) for a malformed case or operator id, or when the
    /// case id, reason, target authentication or ownership evidence contains the target account's UID,
    /// the current owner's UID or the original transaction id: those fields are kept in clear in the
    /// immutable log, where no customer identifier may be written.
    public func requestTransfer(
        _ input: TransferRequestInput, operator staff: StaffID, key: Ed25519PrivateKey, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(input.caseId, field: .caseId)
        try Self.checkIdentifier(staff, field: .operator_)
        try Self.checkNoCustomerIdentifiers(in: input, sourceUID: nil)
        let lineage = try self.lineage(originalTransactionId: input.originalTransactionId, environment: input.environment)
        return try supportStep { group in
            let target = try group.pseudonym(forUID: input.targetUID)
            try group.load(lineages: [lineage], deleted: [target], staff: true, cases: [input.caseId])
            let state = group.state
            let version = try group.lineageVersion(lineage)
            let decided: TransferDecider.Outcome
            var result = outcome("request", caseId: input.caseId, checks: [])
            result.targetUID = input.targetUID
            let source: PlanSource? =
                switch state.lineage(lineage).binding {
                case .unbound: nil
                case .bound(let account): .bound(account)
                case .tombstoned(let account): .tombstoned(account)
                }
            if let source, let sourceUID = try group.uid(of: source.account) {
                // Throwing aborts the write transaction: nothing is appended or saved.
                try Self.checkNoCustomerIdentifiers(in: input, sourceUID: sourceUID)
            }
            if let source {
                let plan = TransferPlan(
                    caseId: input.caseId, lineage: lineage, source: source, target: target, lineageVersion: version,
                    targetAuthentication: input.targetAuthentication, ownershipEvidence: input.ownershipEvidence, reason: input.reason)
                let digest = try Self.digest(of: plan)
                let request = TransferRequested(plan: plan, planDigest: digest, requestedBy: staff, signature: try key.sign(digest.bytes))
                let valid = try Self.verifies(request.signature, digest.bytes, key: state.staff[staff]?.publicKey)
                decided = TransferDecider.request(
                    request, facts: .init(planDigestMatches: true, requestSignatureValid: valid), currentVersion: version, state: state)
                result.plan = plan
                result.planDigest = digest
                result.requestedBy = staff
                result.sourceUID = try group.uid(of: source.account)
            } else {
                decided = TransferDecider.unownedLineage(caseId: input.caseId, requestedBy: staff)
            }
            result.checks = decided.checks
            (result.appended, result.sequences) = try commit(decided.events, step: "request|\(input.caseId)|\(staff)", at: at, in: &group)
            return result
        }
    }

    /// A different approver signs the requested plan's digest with `key`; appends `transferApproved`,
    /// or only a `transferRefused` record.
    public func approveTransfer(
        caseId: String, approver staff: StaffID, key: Ed25519PrivateKey, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(caseId, field: .caseId)
        try Self.checkIdentifier(staff, field: .approver)
        return try supportStep { group in
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "approve")
            let digest = state.transfers[caseId]?.request.planDigest ?? .zero
            let approval = TransferApproved(caseId: caseId, planDigest: digest, approvedBy: staff, signature: try key.sign(digest.bytes))
            var facts = try Self.signatureFacts(state.transfers[caseId], state: state)
            facts.approvalSignatureValid = try Self.verifies(approval.signature, digest.bytes, key: state.staff[staff]?.publicKey)
            let decided = TransferDecider.approve(approval, facts: facts, state: state)
            result.checks = decided.checks
            result.approvedBy = staff
            (result.appended, result.sequences) = try commit(decided.events, step: "approve|\(caseId)|\(staff)", at: at, in: &group)
            return result
        }
    }

    /// The dry run of case `caseId`: the plan, who requested and approved it, every safeguard, and what
    /// applying it would change. Appends nothing.
    public func reviewTransfer(caseId: String) throws -> SupportOutcome {
        try Self.checkIdentifier(caseId, field: .caseId)
        return try store.read { reader in
            var group = try WriteGroup(store: store, reader: reader, clock: clock)
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "dry-run")
            let version = try result.plan.map { try group.lineageVersion($0.lineage) } ?? 0
            let decided = TransferDecider.apply(
                caseId: caseId, appliedBy: nil, applierKeyMatches: false,
                facts: try Self.signatureFacts(state.transfers[caseId], state: state), currentVersion: version, state: state)
            result.checks = decided.checks
            return result
        }
    }

    /// Applies case `caseId` after checking every safeguard again, in one write transaction: ends the
    /// previous account's live entitlement, rebinds the lineage to the target and appends
    /// `transferApplied`. Never grants: the target must restore. A refusal appends only a
    /// `transferRefused` record.
    public func applyTransfer(
        caseId: String, staff: StaffID, key: Ed25519PrivateKey, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(caseId, field: .caseId)
        try Self.checkIdentifier(staff, field: .staff)
        return try supportStep { group in
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "apply")
            let version = try result.plan.map { try group.lineageVersion($0.lineage) } ?? 0
            let decided = TransferDecider.apply(
                caseId: caseId, appliedBy: staff, applierKeyMatches: state.staff[staff]?.publicKey == key.publicKey.rawRepresentation,
                facts: try Self.signatureFacts(state.transfers[caseId], state: state), currentVersion: version, state: state)
            result.checks = decided.checks
            result.effects = decided.accepted ? decided.events : []
            (result.appended, result.sequences) = try commit(decided.events, step: "apply|\(caseId)|\(staff)", at: at, in: &group)
            return result
        }
    }

    // MARK: Audit

    /// The trusted audit trail (denials, deletions, Family Sharing rejections, roster changes and every
    /// transfer step), optionally only for case `caseId` or the lineage of `originalTransactionId`, with
    /// every signature checked again against the roster as it stood at that record.
    /// - Complexity: O(records).
    public func audit(caseId: String? = nil, originalTransactionId: String? = nil, environment: AppleEnvironment? = nil) throws
        -> [AuditRecord]
    {
        let lineage = try originalTransactionId.map { try self.lineage(originalTransactionId: $0, environment: environment) }
        var state = LedgerState()
        var trail: [AuditEntry] = []
        var records: [AuditRecord] = []
        var caseLineages: [String: LineageKey] = [:]
        try store.read { reader in
            try reader.forEachRecord(from: 1, through: .max) { sequence, bytes in
                let record = try RecordCodec.decode(bytes, sequence: sequence)
                for event in record.events {
                    var signer: StaffID?
                    var signature: String?
                    func check(_ valid: Bool) { signature = valid ? "valid" : "invalid" }
                    switch event {
                    case .staffEnrolled(let e):
                        signer = e.enrolledBy
                        if let admin = e.enrolledBy {
                            check(try Self.verifies(e.signature, e.signedMessage, key: state.staff[admin]?.publicKey))
                        } else {
                            signature = "unsigned-first-administrator"
                        }
                    case .staffRemoved(let e):
                        signer = e.removedBy
                        check(try Self.verifies(e.signature, e.signedMessage, key: state.staff[e.removedBy]?.publicKey))
                    case .transferRequested(let e):
                        signer = e.requestedBy
                        caseLineages[e.plan.caseId] = e.plan.lineage
                        check(
                            try Self.digest(of: e.plan) == e.planDigest
                                && Self.verifies(e.signature, e.planDigest.bytes, key: state.staff[e.requestedBy]?.publicKey))
                    case .transferApproved(let e):
                        signer = e.approvedBy
                        let requested = state.transfers[e.caseId]?.request.planDigest
                        check(
                            try requested == e.planDigest && Self.verifies(e.signature, e.planDigest.bytes, key: state.staff[e.approvedBy]?.publicKey)
                        )
                    default:
                        break
                    }
                    let before = trail.count
                    AuditTrail.evolve(&trail, event, sequence: record.sequence, time: record.recordedAt)
                    StateProjection.evolve(&state, event)
                    for entry in trail[before...] {
                        records.append(AuditRecord(entry: entry, signer: signer, signature: signature))
                    }
                }
                return true
            }
        }
        return records.filter { record in
            if let caseId, record.entry.caseId != caseId { return false }
            if let lineage {
                let entryLineage = record.entry.lineage ?? record.entry.caseId.flatMap { caseLineages[$0] }
                if entryLineage != lineage { return false }
            }
            return true
        }
    }

    // MARK: Input checks

    /// The longest case or staff id, in UTF-8 bytes (they are read-model keys; LMDB keys are short).
    public static let maxIdentifierBytes = 128

    /// Throws ``SupportInputError`` naming `field` unless `value` is 1 to ``maxIdentifierBytes`` bytes
    /// of printable ASCII without whitespace (`!` to `~`), as every case id and staff id must be.
    public static func checkIdentifier(_ value: String, field: SupportInputError.Field) throws {
        let bytes = value.utf8
        let rule = "give 1 to \(maxIdentifierBytes) printable ASCII characters without whitespace"
        guard !bytes.isEmpty else { throw SupportInputError(field: field, problem: "is empty: \(rule)") }
        guard bytes.count <= maxIdentifierBytes else {
            throw SupportInputError(field: field, problem: "is \(bytes.count) bytes long: \(rule)")
        }
        guard bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw SupportInputError(field: field, problem: "contains whitespace, a control or a non-ASCII character: \(rule)")
        }
    }

    /// Throws ``SupportInputError`` naming the first of the request's case id, reason, target
    /// authentication and ownership evidence that contains the target UID, `sourceUID` (the current
    /// owner's UID, when known) or the original transaction id (case-sensitive; empty identifiers are
    /// ignored). These fields are kept in clear in the immutable log, where no customer identifier may go.
    static func checkNoCustomerIdentifiers(in input: TransferRequestInput, sourceUID: String?) throws {
        let identifiers = [
            ("the target account's UID", input.targetUID), ("the current owner's account UID", sourceUID ?? ""),
            ("the original transaction id", input.originalTransactionId),
        ]
        let fields: [(SupportInputError.Field, String)] = [
            (.caseId, input.caseId), (.reason, input.reason), (.targetAuthentication, input.targetAuthentication),
            (.ownershipEvidence, input.ownershipEvidence),
        ]
        for (field, text) in fields {
            for (name, identifier) in identifiers where !identifier.isEmpty && Self.bytes(of: text, contain: identifier) {
                throw SupportInputError(
                    field: field,
                    problem:
                        "contains \(name): it would be kept in clear in the immutable log; describe the case without customer identifiers (UIDs, transaction ids)"
                )
            }
        }
    }

    /// True when the UTF-8 bytes of `text` contain those of `needle`.
    static func bytes(of text: String, contain needle: String) -> Bool {
        let haystack = Array(text.utf8)
        let pattern = Array(needle.utf8)
        guard !pattern.isEmpty, pattern.count <= haystack.count else { return pattern.isEmpty }
        for start in 0...(haystack.count - pattern.count) where haystack[start..<(start + pattern.count)].elementsEqual(pattern) {
            return true
        }
        return false
    }

    // MARK: Helpers

    /// SHA-256 of the plan's canonical bytes.
    public static func digest(of plan: TransferPlan) throws -> Digest32 {
        guard let digest = Digest32(try Digest.sha256(plan.canonicalBytes)) else {
            throw CryptoError("SHA-256", detail: "the digest is not 32 bytes")
        }
        return digest
    }

    /// Whether `signature` by the staff key `key` (nil: not enrolled) is valid; throws only when libcrypto fails.
    static func verifies(_ signature: [UInt8], _ message: [UInt8], key: [UInt8]?) throws -> Bool {
        guard let key, let publicKey = try? Ed25519PublicKey(rawRepresentation: key) else { return false }
        return try publicKey.isValidSignature(signature, for: message)
    }

    /// The recorded signatures of a case checked again against the current roster.
    static func signatureFacts(_ transfer: TransferCase?, state: LedgerState) throws -> TransferDecider.SignatureFacts {
        guard let transfer else { return TransferDecider.SignatureFacts(planDigestMatches: false, requestSignatureValid: false) }
        let request = transfer.request
        let digest = request.planDigest.bytes
        return TransferDecider.SignatureFacts(
            planDigestMatches: try Self.digest(of: request.plan) == request.planDigest,
            requestSignatureValid: try verifies(request.signature, digest, key: state.staff[request.requestedBy]?.publicKey),
            approvalSignatureValid: try transfer.approval.map { try verifies($0.signature, digest, key: state.staff[$0.approvedBy]?.publicKey) })
    }

    /// The case, its lineage, the roster and whether the accounts the transfer touches were deleted.
    private func loadCase(_ caseId: String, in group: inout WriteGroup) throws -> LedgerState {
        try group.load(staff: true, cases: [caseId])
        if let plan = group.state.transfers[caseId]?.request.plan {
            try group.load(lineages: [plan.lineage], deleted: [plan.source.account, plan.target])
        }
        return group.state
    }

    private func describe(_ caseId: String, state: LedgerState, group: WriteGroup, step: String) throws -> SupportOutcome {
        var result = outcome(step, caseId: caseId, checks: [])
        guard let transfer = state.transfers[caseId] else { return result }
        let plan = transfer.request.plan
        result.plan = plan
        result.planDigest = transfer.request.planDigest
        result.requestedBy = transfer.request.requestedBy
        result.approvedBy = transfer.approval?.approvedBy
        result.sourceUID = try group.uid(of: plan.source.account)
        result.targetUID = try group.uid(of: plan.target)
        result.effects = TransferDecider.effects(of: transfer.request, appliedBy: "", state: state)
        return result
    }

    private func outcome(_ step: String, caseId: String? = nil, checks: [TransferDecider.Check]) -> SupportOutcome {
        SupportOutcome(
            step: step, caseId: caseId, plan: nil, planDigest: nil, requestedBy: nil, approvedBy: nil, sourceUID: nil, targetUID: nil,
            checks: checks, appended: [], sequences: [], effects: [])
    }

    /// Runs a support step in one write group.
    private func supportStep<T>(_ body: (inout WriteGroup) throws -> T) throws -> T {
        try store.write { reader, writer in
            var group = try WriteGroup(store: store, reader: reader, clock: clock)
            let result = try body(&group)
            try writer.apply(group.batch())
            return result
        }
    }

    /// Appends `events` as one record (its command key derived from the step and the head, so each
    /// step is its own command) at business time `at` (the ledger clock by default).
    private func commit(_ events: [LedgerEvent], step: String, at: Timestamp?, in group: inout WriteGroup) throws -> ([LedgerEvent], [UInt64]) {
        guard !events.isEmpty else { return ([], []) }
        let command = try store.keys.command("support|\(step)|after \(group.appender.head.sequence)")
        let record = try group.append(events, at: at ?? clock(), command: command, attempt: 0)
        return (events, [record.sequence])
    }
}
