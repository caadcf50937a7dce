/// The support-recovery rules as pure functions: given the state, the step a staff member asks for
/// and the facts the caller has already established with cryptography (signature checks, the
/// recomputed plan digest, the lineage's current version), every safeguard's result and the events
/// to append. Nothing here reads a clock, a key or a file.
///
/// A refused transfer step produces exactly one `transferRefused` event; a refused roster change
/// produces none (it is not authenticated, so it is not recorded).
public enum TransferDecider {
    /// One safeguard and whether it holds.
    public struct Check: Equatable, Sendable {
        /// A stable kebab-case name (`approver-enrolled`, `plan-not-stale`, …).
        public var name: String
        public var passed: Bool
        /// What was checked, in words; for a failed check, why it failed.
        public var detail: String

        public init(name: String, passed: Bool, detail: String) {
            self.name = name
            self.passed = passed
            self.detail = detail
        }
    }

    /// The result of a step: every check, and the events to append.
    public struct Outcome: Equatable, Sendable {
        public var checks: [Check]
        /// What to append: the step's events when every check holds, otherwise the refusal record
        /// (transfer steps) or nothing (roster changes).
        public var events: [LedgerEvent]

        /// True when every check holds.
        public var accepted: Bool { checks.allSatisfy(\.passed) }

        /// The failed checks' details, joined: the refusal reason.
        public var refusalReason: String? {
            let failed = checks.filter { !$0.passed }
            return failed.isEmpty ? nil : failed.map { "\($0.name): \($0.detail)" }.joined(separator: "; ")
        }
    }

    /// What the caller verified about a step's signatures.
    public struct SignatureFacts: Equatable, Sendable {
        /// SHA-256 of the recorded plan's canonical bytes equals the recorded plan digest.
        public var planDigestMatches: Bool
        /// The operator's signature verifies over the plan digest under the operator's enrolled key.
        public var requestSignatureValid: Bool
        /// The approver's signature verifies over the request's plan digest under the approver's enrolled key
        /// (nil when there is no approval).
        public var approvalSignatureValid: Bool?

        public init(planDigestMatches: Bool, requestSignatureValid: Bool, approvalSignatureValid: Bool? = nil) {
            self.planDigestMatches = planDigestMatches
            self.requestSignatureValid = requestSignatureValid
            self.approvalSignatureValid = approvalSignatureValid
        }
    }

    // MARK: Roster

    /// What the caller verified about a roster change's signatures.
    public struct RosterSignatures: Equatable, Sendable {
        /// The first administrator's signature over ``RosterChange/signedMessage`` verifies under their enrolled key.
        public var signatureValid: Bool
        /// The second administrator's, when the change is co-signed.
        public var coSignatureValid: Bool?

        public init(signatureValid: Bool, coSignatureValid: Bool? = nil) {
            self.signatureValid = signatureValid
            self.coSignatureValid = coSignatureValid
        }
    }

    /// An administrator changes the roster (enrols or removes a staff member). The two-person rule:
    ///
    /// - with two or more administrators enrolled, a change takes effect only with a second, different
    ///   administrator's signature over the same bytes: signed by one, it is recorded as
    ///   `rosterChangeProposed` and the roster does not change until another administrator co-signs it;
    /// - with a single administrator (the bootstrap), the only change allowed is enrolling a second
    ///   administrator, signed by the one there is;
    /// - `formatOneRules`: a change recorded in storage format 1, judged by that format's rule (one
    ///   administrator's signature).
    ///
    /// The outcome's events are the change's event, or the proposal; a refused change records nothing.
    /// `enrolsLedgerSigningKey`: the caller found the enrolled public key to be the ledger's own signing
    /// key, which is refused like a key enrolled for someone else (it is published and signs for nobody).
    public static func changeRoster(
        _ change: RosterChange, signatures: RosterSignatures, state: LedgerState, formatOneRules: Bool = false,
        enrolsLedgerSigningKey: Bool = false
    ) -> Outcome {
        let admin = change.signer
        var checks = [administratorCheck(admin, state: state)]
        checks.append(
            Check(
                name: "administrator-signature", passed: signatures.signatureValid,
                detail: signatures.signatureValid
                    ? "the change is signed by \(admin ?? "?")'s enrolled key"
                    : "the change's signature does not verify under \(admin ?? "?")'s enrolled key"))
        switch change {
        case .enroll(let enrolment): checks += enrolmentChecks(enrolment, state: state, isLedgerSigningKey: enrolsLedgerSigningKey)
        case .remove(let removal): checks += removalChecks(removal, state: state)
        }
        let administrators = state.administrators
        var events = [change.event]
        if let coSigner = change.coSignedBy {
            checks.append(administratorCheck(coSigner, state: state, name: "co-administrator-enrolled"))
            let sameKey = state.staff[coSigner].map { $0.publicKey == admin.flatMap { state.staff[$0] }?.publicKey } ?? false
            let independent = coSigner != admin && !sameKey
            checks.append(
                Check(
                    name: "co-administrator-independent", passed: independent,
                    detail: independent
                        ? "\(coSigner) is a second administrator" : "\(coSigner) signed the change already: two different administrators must sign"))
            let valid = signatures.coSignatureValid ?? false
            checks.append(
                Check(
                    name: "co-administrator-signature", passed: valid,
                    detail: valid
                        ? "\(coSigner) signed the same change with their enrolled key"
                        : "\(coSigner)'s signature does not verify over this change under their enrolled key"))
        } else if formatOneRules {
            checks.append(Check(name: "format-1-rules", passed: true, detail: "recorded in storage format 1: one administrator signed"))
        } else if administrators.count >= 2 {
            checks.append(
                Check(
                    name: "second-administrator", passed: true,
                    detail:
                        "\(administrators.count) administrators are enrolled: the change takes effect once another administrator co-signs it"))
            events = [.rosterChangeProposed(change)]
        } else {
            let bootstrap: Bool
            if case .enroll(let enrolment) = change { bootstrap = enrolment.roles.contains(.administrator) } else { bootstrap = false }
            checks.append(
                Check(
                    name: "bootstrap", passed: bootstrap,
                    detail: bootstrap
                        ? "the only administrator enrols a second administrator; from then on every roster change needs two administrators"
                        : "with a single administrator the only roster change allowed is enrolling a second administrator (the bootstrap): enrol one, then every roster change needs two administrators' signatures"
                ))
        }
        let accepted = checks.allSatisfy(\.passed)
        return Outcome(checks: checks, events: accepted ? events : [])
    }

    private static func enrolmentChecks(_ enrolment: StaffEnrolled, state: LedgerState, isLedgerSigningKey: Bool) -> [Check] {
        var checks: [Check] = []
        let known = state.staff[enrolment.staff] != nil
        checks.append(
            Check(
                name: "staff-not-enrolled", passed: !known && !enrolment.staff.isEmpty,
                detail: enrolment.staff.isEmpty
                    ? "the staff id is empty" : known ? "\(enrolment.staff) is already enrolled; remove them first" : "\(enrolment.staff) is new"))
        checks.append(
            Check(
                name: "roles-given", passed: !enrolment.roles.isEmpty,
                detail: enrolment.roles.isEmpty ? "no role given" : "roles \(enrolment.roles.names.joined(separator: ","))"))
        let sharedKey = state.staff.first { $0.value.publicKey == enrolment.publicKey }?.key
        let detail =
            if let sharedKey {
                "the public key is already enrolled for \(sharedKey): each person has their own key"
            } else if isLedgerSigningKey {
                "the public key is the ledger's own signing key (`ledger signing-key`), which signs for nobody: each person has their own key (`ledger support keygen`)"
            } else {
                enrolment.publicKey.count == 32 ? "the public key is not enrolled for anyone else" : "not a 32-byte Ed25519 key"
            }
        checks.append(
            Check(
                name: "key-unique", passed: sharedKey == nil && !isLedgerSigningKey && enrolment.publicKey.count == 32, detail: detail))
        return checks
    }

    private static func removalChecks(_ removal: StaffRemoved, state: LedgerState) -> [Check] {
        let member = state.staff[removal.staff]
        let otherAdministrators = state.administrators.filter { $0 != removal.staff }
        let leavesAdministrator = member?.roles.contains(.administrator) != true || !otherAdministrators.isEmpty
        return [
            Check(
                name: "staff-enrolled", passed: member != nil,
                detail: member == nil ? "\(removal.staff) is not enrolled" : "\(removal.staff) is enrolled"),
            Check(
                name: "administrator-remains", passed: leavesAdministrator,
                detail: leavesAdministrator
                    ? "the roster keeps an administrator" : "\(removal.staff) is the last administrator; enrol another first"),
        ]
    }

    private static func administratorCheck(_ admin: StaffID?, state: LedgerState, name: String = "administrator-enrolled") -> Check {
        guard let admin else {
            return Check(name: name, passed: false, detail: "no administrator named")
        }
        let ok = state.staff[admin]?.roles.contains(.administrator) == true
        return Check(
            name: name, passed: ok, detail: ok ? "\(admin) is an enrolled administrator" : "\(admin) is not an enrolled roster administrator")
    }

    // MARK: Transfer steps

    /// An operator opens a transfer. `currentVersion` is the lineage's version now (before the request
    /// is appended); `facts.approvalSignatureValid` is ignored.
    public static func request(
        _ request: TransferRequested, facts: SignatureFacts, currentVersion: UInt64, state: LedgerState
    ) -> Outcome {
        let plan = request.plan
        var checks: [Check] = []
        let exists = state.transfers[plan.caseId] != nil
        checks.append(
            Check(
                name: "case-new", passed: !exists && !plan.caseId.isEmpty,
                detail: plan.caseId.isEmpty ? "the case id is empty" : exists ? "case \(plan.caseId) already exists" : "case \(plan.caseId) is new"))
        for (name, value, label) in [
            ("target-authenticated", plan.targetAuthentication, "how the target account's owner was authenticated"),
            ("ownership-corroborated", plan.ownershipEvidence, "corroborating store-ownership evidence"),
            ("reason-given", plan.reason, "the private case reason"),
        ] {
            let given = value.contains { !$0.isWhitespace }
            checks.append(Check(name: name, passed: given, detail: given ? "\(label) is recorded" : "\(label) is missing"))
        }
        checks.append(roleCheck("operator-enrolled", request.requestedBy, role: .operator_, roleName: "operator", state: state))
        checks.append(
            Check(
                name: "operator-signature", passed: facts.planDigestMatches && facts.requestSignatureValid,
                detail: !facts.planDigestMatches
                    ? "the plan digest does not match the plan"
                    : facts.requestSignatureValid
                        ? "\(request.requestedBy) signed the plan digest with their enrolled key"
                        : "the signature does not verify under \(request.requestedBy)'s enrolled key"))
        let binding = state.lineage(plan.lineage).binding
        let source: PlanSource? =
            switch binding {
            case .unbound: nil
            case .bound(let account): .bound(account)
            case .tombstoned(let account): .tombstoned(account)
            }
        checks.append(
            Check(
                name: "lineage-owned", passed: source != nil && source == plan.source,
                detail: source == nil
                    ? "the lineage is not bound to any account: there is nothing to recover (the customer can restore directly)"
                    : source == plan.source ? "the lineage is \(describe(plan.source))" : "the plan's source does not match the lineage's owner"))
        checks.append(
            Check(
                name: "plan-current", passed: currentVersion == plan.lineageVersion,
                detail: currentVersion == plan.lineageVersion
                    ? "the plan states the lineage's current version \(currentVersion)"
                    : "the plan states version \(plan.lineageVersion) but the lineage is at \(currentVersion)"))
        checks += targetChecks(plan, state: state)
        let accepted = checks.allSatisfy(\.passed)
        return Outcome(
            checks: checks,
            events: accepted
                ? [.transferRequested(request)]
                : [.transferRefused(refusal(plan.caseId, "request", request.requestedBy, checks, lineage: plan.lineage))])
    }

    /// A request for a lineage nobody owns: refused, there is nothing to recover.
    public static func unownedLineage(caseId: String, requestedBy: StaffID, lineage: LineageKey) -> Outcome {
        let checks = [
            Check(
                name: "lineage-owned", passed: false,
                detail: "the lineage is not bound to any account: there is nothing to recover (the customer can restore directly)")
        ]
        return Outcome(checks: checks, events: [.transferRefused(refusal(caseId, "request", requestedBy, checks, lineage: lineage))])
    }

    /// A different approver signs the request's plan. `facts.approvalSignatureValid`: the approver's
    /// signature verifies over the request's plan digest under the approver's enrolled key.
    public static func approve(_ approval: TransferApproved, facts: SignatureFacts, state: LedgerState) -> Outcome {
        var checks: [Check] = []
        guard let transfer = state.transfers[approval.caseId] else {
            checks.append(Check(name: "case-exists", passed: false, detail: "no transfer was requested for case \(approval.caseId)"))
            return Outcome(checks: checks, events: [.transferRefused(refusal(approval.caseId, "approve", approval.approvedBy, checks))])
        }
        checks.append(Check(name: "case-exists", passed: true, detail: "case \(approval.caseId) was requested"))
        checks.append(
            Check(
                name: "case-open", passed: !transfer.applied && transfer.approval == nil,
                detail: transfer.applied
                    ? "the transfer was already applied"
                    : transfer.approval.map { "already approved by \($0.approvedBy)" } ?? "the case awaits approval"))
        checks += approvalChecks(approval, request: transfer.request, signatureValid: facts.approvalSignatureValid ?? false, state: state)
        checks.append(
            Check(
                name: "request-signature", passed: facts.planDigestMatches && facts.requestSignatureValid,
                detail: facts.planDigestMatches && facts.requestSignatureValid
                    ? "the operator's signature over the plan verifies"
                    : "the request's plan digest or operator signature does not verify"))
        checks += targetChecks(transfer.request.plan, state: state)
        let accepted = checks.allSatisfy(\.passed)
        return Outcome(
            checks: checks,
            events: accepted
                ? [.transferApproved(approval)]
                : [.transferRefused(refusal(approval.caseId, "approve", approval.approvedBy, checks, lineage: transfer.request.plan.lineage))])
    }

    /// Every safeguard of applying case `caseId`, and the events applying it appends: the end of the
    /// previous account's live entitlement, then `transferApplied`. Never grants.
    ///
    /// - Parameters:
    ///   - applier: who runs the apply, with their signature; nil for a dry run (the applier checks are left out).
    ///   - changesSinceRequest: how many records changed the lineage after the request's record
    ///     (nil: the request is not among its records); the plan is fresh while none did.
    public static func apply(
        caseId: String, applier: Applier?, facts: SignatureFacts, changesSinceRequest: UInt64?, state: LedgerState
    ) -> Outcome {
        var checks: [Check] = []
        let staff = applier?.staff ?? ""
        guard let transfer = state.transfers[caseId] else {
            checks.append(Check(name: "case-exists", passed: false, detail: "no transfer was requested for case \(caseId)"))
            return Outcome(checks: checks, events: [.transferRefused(refusal(caseId, "apply", staff, checks))])
        }
        let request = transfer.request
        let plan = request.plan
        checks.append(Check(name: "case-exists", passed: true, detail: "case \(caseId) was requested by \(request.requestedBy)"))
        checks.append(
            Check(
                name: "not-applied", passed: !transfer.applied,
                detail: transfer.applied ? "the transfer was already applied" : "the transfer has not been applied"))
        checks.append(roleCheck("operator-enrolled", request.requestedBy, role: .operator_, roleName: "operator", state: state))
        checks.append(
            Check(
                name: "operator-signature", passed: facts.planDigestMatches && facts.requestSignatureValid,
                detail: !facts.planDigestMatches
                    ? "the recorded plan digest does not match the plan"
                    : facts.requestSignatureValid
                        ? "\(request.requestedBy)'s signature over the plan digest verifies again"
                        : "\(request.requestedBy)'s signature does not verify under their enrolled key"))
        if let approval = transfer.approval {
            checks.append(Check(name: "approved", passed: true, detail: "approved by \(approval.approvedBy)"))
            checks += approvalChecks(approval, request: request, signatureValid: facts.approvalSignatureValid ?? false, state: state)
            if let member = state.staff[approval.approvedBy] {
                // An approval is tied to the enrolment it was made under: a removal ends it for good.
                let current = member.enrolledAfter == transfer.approverEnrolledAfter
                checks.append(
                    Check(
                        name: "approval-current-enrolment", passed: current,
                        detail: current
                            ? "\(approval.approvedBy) approved under their current enrolment"
                            : "\(approval.approvedBy) approved before they were removed and enrolled again: an approval does not outlive its enrolment; open a new case"
                    ))
            }
        } else {
            checks.append(
                Check(name: "approved", passed: false, detail: "no independent approver has approved this plan"))
        }
        checks += targetChecks(plan, state: state)
        let binding = state.lineage(plan.lineage).binding
        let sourceHolds: Bool =
            switch (binding, plan.source) {
            case (.bound(let a), .bound(let b)), (.tombstoned(let a), .tombstoned(let b)): a == b
            default: false
            }
        let fresh = changesSinceRequest == 0 && sourceHolds
        checks.append(
            Check(
                name: "plan-not-stale", passed: fresh,
                detail: fresh
                    ? "the lineage has not changed since the plan was signed"
                    : "the plan is stale: the lineage changed after it was signed (\(changesSinceRequest.map { "\($0) changing record(s) since the request" } ?? "its request is not in the lineage's history")); open a new case"
            ))
        if let applier {
            let authorised = isApplier(applier.staff, state: state)
            checks.append(
                Check(
                    name: "applier-enrolled", passed: authorised,
                    detail: authorised ? "\(applier.staff) is enrolled support staff" : "\(applier.staff) is not enrolled as an operator or approver")
            )
            checks.append(
                Check(
                    name: "applier-signature", passed: authorised && applier.signatureValid,
                    detail: applier.signatureValid
                        ? "\(applier.staff) signed the apply with their enrolled key"
                        : "the apply's signature does not verify under \(applier.staff)'s enrolled key (the key given is not theirs)"))
        }
        guard checks.allSatisfy(\.passed) else {
            return Outcome(checks: checks, events: [.transferRefused(refusal(caseId, "apply", staff, checks, lineage: plan.lineage))])
        }
        return Outcome(
            checks: checks, events: effects(of: request, appliedBy: staff, signature: applier?.signature ?? [], state: state))
    }

    /// Who applies a transfer: the staff member, their signature over ``TransferApplied/signedMessage``
    /// and whether it verifies under their enrolled key.
    public struct Applier: Equatable, Sendable {
        public var staff: StaffID
        public var signature: [UInt8]
        public var signatureValid: Bool

        public init(staff: StaffID, signature: [UInt8], signatureValid: Bool) {
            self.staff = staff
            self.signature = signature
            self.signatureValid = signatureValid
        }
    }

    /// Whether `staff` may apply a transfer: an enrolled operator or approver.
    public static func isApplier(_ staff: StaffID, state: LedgerState) -> Bool {
        state.staff[staff].map { !$0.roles.isDisjoint(with: [.operator_, .approver]) } ?? false
    }

    /// The events applying `request` appends: `entitlementEnded(.transferred)` when the previous
    /// account holds a live entitlement, then `transferApplied` signed by the applier.
    public static func effects(
        of request: TransferRequested, appliedBy: StaffID, signature: [UInt8] = [], state: LedgerState
    ) -> [LedgerEvent] {
        let plan = request.plan
        var events: [LedgerEvent] = []
        if let entitlement = state.lineage(plan.lineage).entitlement, entitlement.account == plan.source.account,
            entitlement.endedBecause == nil
        {
            events.append(.entitlementEnded(lineage: plan.lineage, account: plan.source.account, reason: .transferred))
        }
        events.append(
            .transferApplied(
                TransferApplied(
                    caseId: plan.caseId, planDigest: request.planDigest, lineage: plan.lineage, source: plan.source,
                    target: plan.target, appliedBy: appliedBy, signature: signature)))
        return events
    }

    // MARK: Shared checks

    private static func roleCheck(_ name: String, _ staff: StaffID, role: StaffRoles, roleName: String, state: LedgerState) -> Check {
        guard let member = state.staff[staff] else {
            return Check(name: name, passed: false, detail: "\(staff) is not enrolled (never enrolled, or removed)")
        }
        let ok = member.roles.contains(role)
        return Check(name: name, passed: ok, detail: ok ? "\(staff) is enrolled as \(roleName)" : "\(staff) does not hold the \(roleName) role")
    }

    private static func approvalChecks(
        _ approval: TransferApproved, request: TransferRequested, signatureValid: Bool, state: LedgerState
    ) -> [Check] {
        var checks = [roleCheck("approver-enrolled", approval.approvedBy, role: .approver, roleName: "approver", state: state)]
        let samePerson =
            approval.approvedBy == request.requestedBy
            || (state.staff[approval.approvedBy].map { $0.publicKey == state.staff[request.requestedBy]?.publicKey } ?? false)
        checks.append(
            Check(
                name: "approver-independent", passed: !samePerson,
                detail: samePerson
                    ? "\(approval.approvedBy) requested this transfer: the operator can never approve their own request"
                    : "\(approval.approvedBy) is not the requester \(request.requestedBy)"))
        let samePlan = approval.planDigest == request.planDigest
        checks.append(
            Check(
                name: "approval-same-plan", passed: samePlan,
                detail: samePlan
                    ? "the approval is for the requested plan"
                    : "the approval is for plan digest \(approval.planDigest.hex), but the case's recorded plan has digest \(request.planDigest.hex): the plan reviewed is not the one recorded"
            ))
        checks.append(
            Check(
                name: "approver-signature", passed: signatureValid && samePlan,
                detail: signatureValid
                    ? "\(approval.approvedBy)'s signature over the plan digest verifies"
                    : "\(approval.approvedBy)'s signature does not verify over this plan's digest under their enrolled key"))
        return checks
    }

    private static func targetChecks(_ plan: TransferPlan, state: LedgerState) -> [Check] {
        var checks: [Check] = []
        let staffOwner = state.staff.first { $0.value.ownAccount == plan.target }?.key
        checks.append(
            Check(
                name: "target-not-staff", passed: staffOwner == nil,
                detail: staffOwner.map { "the target account belongs to staff member \($0)" } ?? "the target is no staff member's own account"))
        let deleted = state.deletedAccounts.contains(plan.target)
        let same = plan.source == .bound(plan.target)
        checks.append(
            Check(
                name: "target-eligible", passed: !deleted && !same,
                detail: deleted
                    ? "the target account was deleted"
                    : same ? "the target already owns the lineage" : "the target is a live account other than the owner"))
        // A transfer resets the entitlement: moving a refunded lineage would let a transaction signed
        // before the refund grant again on the target.
        let refunded = state.lineage(plan.lineage).entitlement?.revokedAt != nil
        checks.append(
            Check(
                name: "not-refunded", passed: !refunded,
                detail: refunded
                    ? "Apple refunded or revoked this subscription: there is nothing to recover"
                    : "the subscription is not refunded or revoked"))
        return checks
    }

    private static func refusal(
        _ caseId: String, _ step: String, _ staff: StaffID, _ checks: [Check], lineage: LineageKey? = nil
    ) -> TransferRefused {
        let reason = checks.filter { !$0.passed }.map { "\($0.name): \($0.detail)" }.joined(separator: "; ")
        return TransferRefused(caseId: caseId, step: step, staff: staff, reason: reason, lineage: lineage)
    }

    static func describe(_ source: PlanSource) -> String {
        switch source {
        case .bound(let account): "bound to \(account)"
        case .tombstoned(let account): "tombstoned (former owner \(account))"
        }
    }
}
