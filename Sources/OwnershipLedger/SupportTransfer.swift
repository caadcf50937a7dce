public import AppleSignedData
public import LedgerCore
public import LedgerCrypto
public import LedgerStore
public import Projections

/// What a support step did (or, for a dry run, would do).
public struct SupportOutcome: Sendable {
    /// `enroll`, `remove`, `propose` (a roster change awaiting a second administrator), `cosign`,
    /// `review-change` (a proposed roster change shown, nothing appended), `request`, `approve`,
    /// `dry-run` or `apply`.
    public var step: String
    public var caseId: String?
    /// A roster change, with SHA-256 of the bytes its administrators sign (what `cosign --change` names).
    public var rosterChange: RosterChange?
    public var changeDigest: Digest32?
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

/// One audit entry with its signatures checked again against the roster as it was at that point.
public struct AuditRecord: Sendable {
    public var entry: AuditEntry
    /// Who signed (the administrator, operator, approver or applier), for signed support events.
    public var signer: StaffID?
    /// `valid`, `invalid`, `unsigned-first-administrator` (set by `init` on an empty roster; an
    /// unsigned enrolment anywhere later is `invalid`), `unsigned-format-1` (an
    /// apply recorded in storage format 1, which kept no apply signature), or nil for unsigned entries.
    public var signature: String?
    /// The second administrator of a co-signed roster change.
    public var coSigner: StaffID?
    /// For a roster change: `valid` or `invalid` (co-signed), `missing` (signed by one administrator
    /// while two or more were enrolled: a violation), `not-required-bootstrap` (the only administrator
    /// enrolled the second), `not-required-format-1` (recorded under storage format 1's rules).
    public var coSignature: String?
    /// For a roster change or proposal: SHA-256 of the bytes its administrators sign.
    public var changeDigest: Digest32?

    /// Every signature of the entry that was checked verifies.
    public var isValid: Bool { signature != "invalid" && coSignature != "invalid" && coSignature != "missing" }
}

/// What `audit` found: the entries, and whether the log they were read from is intact.
public struct AuditReport: Sendable {
    public var records: [AuditRecord]
    /// The first break of the hash chain, if the log was changed: then no entry can be trusted.
    public var chainFault: ChainFault?

    /// Every signature verifies and the chain is intact.
    public var isValid: Bool { chainFault == nil && records.allSatisfy(\.isValid) }
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

    /// An administrator enrols a staff member; the administrator's key signs the enrolment. With two or
    /// more administrators enrolled, the enrolment is recorded as a proposal (step `propose`, with its
    /// ``SupportOutcome/changeDigest``) that takes effect when another administrator co-signs it
    /// (``coSignRosterChange(digest:administrator:key:at:)``); with a single administrator, only a second
    /// administrator can be enrolled (the bootstrap). Throws ``SupportRefusal`` (appending nothing) when a
    /// safeguard fails.
    public func enrollStaff(
        _ staff: StaffID, roles: StaffRoles, publicKey: Ed25519PublicKey, ownAccountUID: String?, administrator: StaffID,
        administratorKey: some LedgerSigner, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(staff, field: .staff)
        try Self.checkIdentifier(administrator, field: .administrator)
        return try supportStep { group in
            let ownAccount = try ownAccountUID.map { try group.pseudonym(forUID: $0) }
            var enrolment = StaffEnrolled(
                staff: staff, roles: roles, publicKey: publicKey.rawRepresentation, ownAccount: ownAccount,
                enrolledBy: administrator, signature: [], signedAfter: group.appender.head.sequence)
            enrolment.signature = try administratorKey.sign(enrolment.signedMessage)
            return try changeRoster(.enroll(enrolment), step: "enroll", at: at, group: &group)
        }
    }

    /// An administrator removes a staff member, who can no longer request, approve or apply. The
    /// two-person rule of ``enrollStaff(_:roles:publicKey:ownAccountUID:administrator:administratorKey:at:)`` applies.
    public func removeStaff(
        _ staff: StaffID, administrator: StaffID, administratorKey: some LedgerSigner, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(staff, field: .staff)
        try Self.checkIdentifier(administrator, field: .administrator)
        return try supportStep { group in
            var removal = StaffRemoved(staff: staff, removedBy: administrator, signature: [], signedAfter: group.appender.head.sequence)
            removal.signature = try administratorKey.sign(removal.signedMessage)
            return try changeRoster(.remove(removal), step: "remove", at: at, group: &group)
        }
    }

    /// A second administrator co-signs the proposed roster change whose digest is `digest` (printed when
    /// it was proposed, and by `ledger audit`): the change takes effect. Throws ``SupportRefusal``
    /// (appending nothing) when no such change awaits a signature or a safeguard fails.
    public func coSignRosterChange(
        digest: Digest32, administrator: StaffID, key: some LedgerSigner, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(administrator, field: .administrator)
        return try supportStep { group in
            let (change, checks) = try proposedChange(digest, step: "cosign", in: &group)
            let state = group.state
            let message = change.signedMessage
            let coSigned = change.coSigned(by: administrator, signature: try key.sign(message))
            var decided = TransferDecider.changeRoster(
                coSigned,
                signatures: .init(
                    signatureValid: try Self.verifies(change.signature, message, key: change.signer.flatMap { state.staff[$0]?.publicKey }),
                    coSignatureValid: try Self.verifies(coSigned.coSignature, message, key: state.staff[administrator]?.publicKey)),
                state: state, enrolsLedgerSigningKey: try enrolsSigningKey(change, group))
            decided.checks.insert(contentsOf: checks, at: 0)
            var result = outcome("cosign", checks: decided.checks)
            (result.rosterChange, result.changeDigest) = (coSigned, digest)
            guard decided.accepted else { throw SupportRefusal(outcome: result) }
            (result.appended, result.sequences) = try commit(decided.events, command: "support|roster-change|\(digest.hex)", at: at, in: &group)
            return result
        }
    }

    /// The proposed roster change whose digest is `digest` and every safeguard as the roster stands
    /// (step `review-change`): what a second administrator reads before co-signing. Appends nothing.
    public func reviewRosterChange(digest: Digest32) throws -> SupportOutcome {
        try reviewStep { group in
            let (change, checks) = try proposedChange(digest, step: "review-change", in: &group)
            let state = group.state
            let valid = try Self.verifies(
                change.signature, change.signedMessage, key: change.signer.flatMap { state.staff[$0]?.publicKey })
            var result = outcome(
                "review-change",
                checks: checks
                    + TransferDecider.changeRoster(
                        change, signatures: .init(signatureValid: valid), state: state, enrolsLedgerSigningKey: try enrolsSigningKey(change, group)
                    ).checks)
            (result.rosterChange, result.changeDigest) = (change, digest)
            return result
        }
    }

    /// Whether `change` enrols the ledger's own signing public key (its fingerprint is the one the store recorded).
    private func enrolsSigningKey(_ change: RosterChange, _ group: WriteGroup) throws -> Bool {
        guard case .enroll(let enrolment) = change, let recorded = try group.reader.meta(.signingKey),
            let key = try? Ed25519PublicKey(rawRepresentation: enrolment.publicKey)
        else { return false }
        return try SigningKey.fingerprint(key) == recorded
    }

    /// The roster change proposed with digest `digest` and not co-signed yet, with the checks saying
    /// so, the roster loaded; throws ``SupportRefusal`` when there is none.
    private func proposedChange(_ digest: Digest32, step: String, in group: inout WriteGroup) throws -> (RosterChange, [TransferDecider.Check]) {
        func refuse(_ name: String, _ detail: String) -> SupportRefusal {
            SupportRefusal(outcome: outcome(step, checks: [TransferDecider.Check(name: name, passed: false, detail: detail)]))
        }
        let proposal = CommandRef(try store.keys.command("support|roster-proposal|\(digest.hex)"), home: nil)
        guard let proposed = try group.latestRecord(of: proposal), case .rosterChangeProposed(let change)? = proposed.events.first,
            try Self.digest(of: change.signedMessage) == digest
        else {
            throw refuse(
                "change-proposed",
                "no roster change with digest \(digest.hex) was proposed: use the digest the proposing administrator's `ledger support enroll` or `remove` printed (also in `ledger audit`)"
            )
        }
        if let done = try group.latestRecord(of: CommandRef(try store.keys.command("support|roster-change|\(digest.hex)"), home: nil)) {
            throw refuse("change-open", "the change was already co-signed (record \(done.sequence))")
        }
        try group.load(staff: true)
        let check = TransferDecider.Check(
            name: "change-proposed", passed: true, detail: "proposed by \(change.signer ?? "?") at record \(proposed.sequence), not co-signed yet")
        return (change, [check])
    }

    /// A roster change signed by its first administrator: checks the signature against the roster,
    /// decides, and appends the change (or, when it needs a second administrator, its proposal), or
    /// throws ``SupportRefusal`` recording nothing.
    private func changeRoster(_ change: RosterChange, step: String, at: Timestamp?, group: inout WriteGroup) throws -> SupportOutcome {
        try group.load(staff: true)
        let state = group.state
        let message = change.signedMessage
        let valid = try Self.verifies(change.signature, message, key: change.signer.flatMap { state.staff[$0]?.publicKey })
        let decided = TransferDecider.changeRoster(
            change, signatures: .init(signatureValid: valid), state: state, enrolsLedgerSigningKey: try enrolsSigningKey(change, group))
        let digest = try Self.digest(of: message)
        let proposal: Bool
        if case .rosterChangeProposed? = decided.events.first { proposal = true } else { proposal = false }
        var result = outcome(proposal ? "propose" : step, checks: decided.checks)
        (result.rosterChange, result.changeDigest) = (change, digest)
        guard decided.accepted else { throw SupportRefusal(outcome: result) }
        let command = proposal ? "support|roster-proposal|\(digest.hex)" : "support|roster-change|\(digest.hex)"
        (result.appended, result.sequences) = try commit(decided.events, command: command, at: at, in: &group)
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
        _ input: TransferRequestInput, operator staff: StaffID, key: some LedgerSigner, at: Timestamp? = nil
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
                decided = TransferDecider.unownedLineage(caseId: input.caseId, requestedBy: staff, lineage: lineage)
            }
            result.checks = decided.checks
            (result.appended, result.sequences) = try commit(decided.events, step: "request|\(input.caseId)|\(staff)", at: at, in: &group)
            return result
        }
    }

    /// A different approver signs `planDigest`, the digest of the plan they reviewed (the dry run
    /// prints it), with `key`; appends `transferApproved`, or only a `transferRefused` record, which is
    /// what a digest other than the case's recorded plan's gets (`approval-same-plan`).
    public func approveTransfer(
        caseId: String, approver staff: StaffID, key: some LedgerSigner, planDigest digest: Digest32, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(caseId, field: .caseId)
        try Self.checkIdentifier(staff, field: .approver)
        return try supportStep { group in
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "approve")
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
        return try reviewStep { group in
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "dry-run")
            let changes = try result.plan.flatMap { try group.changes(of: $0.lineage, sinceRequestOf: caseId) }
            let decided = TransferDecider.apply(
                caseId: caseId, applier: nil, facts: try Self.signatureFacts(state.transfers[caseId], state: state),
                changesSinceRequest: changes, state: state)
            result.checks = decided.checks
            return result
        }
    }

    /// Applies case `caseId` after checking every safeguard again, in one write transaction: ends the
    /// previous account's live entitlement, rebinds the lineage to the target and appends
    /// `transferApplied`, signed with `key` (``TransferApplied/signedMessage``). Never grants: the
    /// target must restore. A refusal appends only a `transferRefused` record.
    public func applyTransfer(
        caseId: String, staff: StaffID, key: some LedgerSigner, at: Timestamp? = nil
    ) throws -> SupportOutcome {
        try Self.checkIdentifier(caseId, field: .caseId)
        try Self.checkIdentifier(staff, field: .staff)
        return try supportStep { group in
            let state = try loadCase(caseId, in: &group)
            var result = try describe(caseId, state: state, group: group, step: "apply")
            let changes = try result.plan.flatMap { try group.changes(of: $0.lineage, sinceRequestOf: caseId) }
            let message = TransferApplied.signedMessage(caseId: caseId, planDigest: result.planDigest ?? .zero, appliedBy: staff)
            let signature = try key.sign(message)
            let applier = TransferDecider.Applier(
                staff: staff, signature: signature,
                signatureValid: try Self.verifies(signature, message, key: state.staff[staff]?.publicKey))
            let decided = TransferDecider.apply(
                caseId: caseId, applier: applier, facts: try Self.signatureFacts(state.transfers[caseId], state: state),
                changesSinceRequest: changes, state: state)
            result.checks = decided.checks
            result.effects = decided.accepted ? decided.events : []
            (result.appended, result.sequences) = try commit(decided.events, step: "apply|\(caseId)|\(staff)", at: at, in: &group)
            return result
        }
    }

    // MARK: Audit

    /// The trusted audit trail (denials, deletions, Family Sharing rejections, roster changes and every
    /// transfer step), optionally only for case `caseId` or the lineage of `originalTransactionId`, with
    /// every signature checked again against the roster as it stood at that record, and the hash
    /// chain of the log they come from checked as `verify` checks it. (A store rewritten whole, its
    /// chain recomputed, is caught only against a signed checkpoint: `verify --checkpoint`.)
    /// - Complexity: O(records).
    public func audit(caseId: String? = nil, originalTransactionId: String? = nil, environment: AppleEnvironment? = nil) throws
        -> AuditReport
    {
        let lineage = try originalTransactionId.map { try self.lineage(originalTransactionId: $0, environment: environment) }
        var state = LedgerState()
        var trail: [AuditEntry] = []
        var records: [AuditRecord] = []
        var caseLineages: [String: LineageKey] = [:]
        var formatOneThrough: UInt64 = 0
        var chainFault: ChainFault?
        try store.read { reader in
            var walk = try ChainWalk(head: try reader.head())
            try reader.forEachRecord(from: 1, through: walk.head.sequence) { sequence, bytes in
                guard try walk.add(sequence, bytes, reader: reader) else { return false }
                let record = try RecordCodec.decode(bytes, sequence: sequence)
                if sequence == 1, case .storeUpgraded(let upgraded)? = record.events.first { formatOneThrough = 1 + upgraded.copiedRecords }
                let formatOne = sequence > 1 && sequence <= formatOneThrough
                for event in record.events {
                    var checked = AuditRecord(entry: AuditEntry(sequence: 0, time: 0, kind: "", reason: ""))
                    func verdict(_ valid: Bool) -> String { valid ? "valid" : "invalid" }
                    switch event {
                    case .staffEnrolled, .staffRemoved, .rosterChangeProposed:
                        try Self.audit(event, state: state, formatOne: formatOne, into: &checked)
                    case .transferRequested(let e):
                        checked.signer = e.requestedBy
                        caseLineages[e.plan.caseId] = e.plan.lineage
                        checked.signature = verdict(
                            try Self.digest(of: e.plan) == e.planDigest
                                && Self.verifies(e.signature, e.planDigest.bytes, key: state.staff[e.requestedBy]?.publicKey))
                    case .transferApproved(let e):
                        checked.signer = e.approvedBy
                        let requested = state.transfers[e.caseId]?.request.planDigest
                        checked.signature = verdict(
                            try requested == e.planDigest && Self.verifies(e.signature, e.planDigest.bytes, key: state.staff[e.approvedBy]?.publicKey)
                        )
                    case .transferApplied(let e):
                        checked.signer = e.appliedBy
                        checked.signature =
                            formatOne && e.signature.isEmpty
                            ? "unsigned-format-1" : verdict(try Self.verifies(e.signature, e.signedMessage, key: state.staff[e.appliedBy]?.publicKey))
                    default:
                        break
                    }
                    let before = trail.count
                    AuditTrail.evolve(&trail, event, sequence: record.sequence, time: record.recordedAt)
                    StateProjection.evolve(&state, event)
                    for entry in trail[before...] {
                        checked.entry = entry
                        records.append(checked)
                    }
                }
                return true
            }
            chainFault = walk.finish()
        }
        let selected = records.filter { record in
            if let caseId, record.entry.caseId != caseId { return false }
            if let lineage {
                let entryLineage = record.entry.lineage ?? record.entry.caseId.flatMap { caseLineages[$0] }
                if entryLineage != lineage { return false }
            }
            return true
        }
        return AuditReport(records: selected, chainFault: chainFault)
    }

    /// The signatures of a roster change or proposal, checked against the roster before it.
    private static func audit(_ event: LedgerEvent, state: LedgerState, formatOne: Bool, into checked: inout AuditRecord) throws {
        let change: RosterChange
        switch event {
        case .staffEnrolled, .staffRemoved:
            guard let applied = RosterChange(event) else { return }
            change = applied
        case .rosterChangeProposed(let proposed): change = proposed
        default: return
        }
        let message = change.signedMessage
        guard let signer = change.signer else {
            // Only the roster's first member is enrolled unsigned (`init --admin`); any later one is forged.
            checked.signature = state.staff.isEmpty ? "unsigned-first-administrator" : "invalid"
            return
        }
        checked.changeDigest = try digest(of: message)
        checked.signer = signer
        checked.signature = try verifies(change.signature, message, key: state.staff[signer]?.publicKey) ? "valid" : "invalid"
        guard case .rosterChangeProposed = event else {
            if let coSigner = change.coSignedBy {
                checked.coSigner = coSigner
                let valid = try coSigner != signer && verifies(change.coSignature, message, key: state.staff[coSigner]?.publicKey)
                checked.coSignature = valid ? "valid" : "invalid"
            } else if formatOne {
                checked.coSignature = "not-required-format-1"
            } else if case .enroll(let e) = change, e.roles.contains(.administrator), state.administrators.count == 1 {
                checked.coSignature = "not-required-bootstrap"
            } else {
                checked.coSignature = "missing"
            }
            return
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
    /// owner's UID, when known) or the original transaction id (ignoring case, and spaces, dashes and
    /// dots between characters; empty identifiers are ignored), a run of ten or more digits (a
    /// transaction, order or phone number, however spaced) or an email address. These fields are kept
    /// in clear in the immutable log, where no customer identifier may go.
    static func checkNoCustomerIdentifiers(in input: TransferRequestInput, sourceUID: String?) throws {
        let identifiers = [
            ("the target account's UID", input.targetUID), ("the current owner's account UID", sourceUID ?? ""),
            ("the original transaction id", input.originalTransactionId),
        ]
        let fields: [(SupportInputError.Field, String)] = [
            (.caseId, input.caseId), (.reason, input.reason), (.targetAuthentication, input.targetAuthentication),
            (.ownershipEvidence, input.ownershipEvidence),
        ]
        let rule =
            "it would be kept in clear in the immutable log; describe the case without customer identifiers (UIDs, transaction ids, order ids, emails): refer to your ticket"
        for (field, text) in fields {
            let folded = Self.folded(text)
            for (name, identifier) in identifiers where !identifier.isEmpty {
                let needle = Self.folded(identifier)
                if Self.bytes(of: text, contain: identifier) || (!needle.isEmpty && Self.bytes(of: folded, contain: needle)) {
                    throw SupportInputError(field: field, problem: "contains \(name): \(rule)")
                }
            }
            if Self.longestDigitRun(in: folded) >= 10 {
                throw SupportInputError(
                    field: field, problem: "contains a number of ten or more digits (a transaction, order or phone number?): \(rule)")
            }
            if Self.containsEmailAddress(text) { throw SupportInputError(field: field, problem: "contains an email address: \(rule)") }
        }
    }

    /// `text` in ASCII lower case without spaces, dashes, dots or underscores, so an identifier written
    /// in other case or spaced out ("2000 0000 0000 0006", "HANK-2") still matches.
    static func folded(_ text: String) -> String {
        String(String.UnicodeScalarView(text.lowercased().unicodeScalars.filter { !" \t-._".unicodeScalars.contains($0) }))
    }

    /// The longest run of ASCII digits in `text`.
    static func longestDigitRun(in text: String) -> Int {
        var longest = 0
        var run = 0
        for byte in text.utf8 {
            run = (0x30...0x39).contains(byte) ? run + 1 : 0
            longest = max(longest, run)
        }
        return longest
    }

    /// Whether `text` holds something shaped like an email address (`local@domain.tld`).
    static func containsEmailAddress(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func isWordByte(_ byte: UInt8) -> Bool { byte > 0x20 && byte != 0x40 && byte != 0x3C && byte != 0x3E && byte != 0x2C }
        for (index, byte) in bytes.enumerated() where byte == 0x40 {
            let local = bytes[..<index].reversed().prefix(while: isWordByte)
            let domain = bytes[(index + 1)...].prefix(while: isWordByte)
            if !local.isEmpty, let dot = domain.lastIndex(of: 0x2E), dot > domain.startIndex, dot < domain.endIndex - 1 { return true }
        }
        return false
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
    public static func digest(of plan: TransferPlan) throws -> Digest32 { try digest(of: plan.canonicalBytes) }

    /// SHA-256 of `bytes` (a plan's canonical bytes, a roster change's signed bytes).
    public static func digest(of bytes: [UInt8]) throws -> Digest32 {
        guard let digest = Digest32(try Digest.sha256(bytes)) else { throw CryptoError("SHA-256", detail: "the digest is not 32 bytes") }
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

    /// Runs a step that appends nothing (a review) on a snapshot, as a write group would see it.
    private func reviewStep<T>(_ body: (inout WriteGroup) throws -> T) throws -> T {
        try store.read { reader in
            var group = try WriteGroup(store: store, reader: reader, clock: clock)
            return try body(&group)
        }
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
        try commit(events, command: "support|\(step)|after \(group.appender.head.sequence)", at: at, in: &group)
    }

    /// Appends `events` as one record of the command `descriptor` names (its keyed hash is the key).
    private func commit(
        _ events: [LedgerEvent], command descriptor: String, at: Timestamp?, in group: inout WriteGroup
    ) throws -> ([LedgerEvent], [UInt64]) {
        guard !events.isEmpty else { return ([], []) }
        let command = try store.keys.command(descriptor)
        let record = try group.append(events, at: at ?? clock(), command: command, attempt: 0)
        return (events, [record.sequence])
    }
}
