import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Projections
import Testing

/// Support-controlled recovery (issue 5) through the library: roster, request, approval, dry run,
/// apply, refusals, audit and the invariant checker.
@Suite struct SupportTransferTests {
    let ledger: Ledger
    let directory: TemporaryDirectory
    let submit: SubmitProtocol
    let t = Fixtures.start
    let day = Fixtures.day
    let root: Ed25519PrivateKey
    /// The second administrator.
    let ann: Ed25519PrivateKey
    /// Operator.
    let olivia: Ed25519PrivateKey
    /// Approver.
    let adam: Ed25519PrivateKey
    /// Operator and approver; their own customer account is `pat-personal`.
    let pat: Ed25519PrivateKey

    init() throws {
        let staffed = try StaffedLedger("ledger-support")
        (ledger, directory, submit) = (staffed.ledger, staffed.directory, staffed.submit)
        (root, ann, olivia, adam) = (staffed.root, staffed.ann, staffed.olivia, staffed.adam)
        pat = try Ed25519PrivateKey.generate()
        try staffed.enroll("pat", roles: [.operator_, .approver], key: pat, ownAccountUID: "pat-personal")
    }

    // MARK: Helpers

    @discardableResult
    func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }

    @discardableResult
    func purchase(_ uid: String, _ otid: String, at: Int64, type: String = "purchase", tid: String? = nil) -> [String: Any] {
        send(["type": type, "account": uid, "transaction": Fixtures.transaction(otid, transactionId: tid, at: at), "at": at])
    }

    func input(_ caseId: String, otid: String = "1001", target: String = "bob") -> TransferRequestInput {
        TransferRequestInput(
            caseId: caseId, reason: "customer lost access to the Apple-linked account; ticket 4711", originalTransactionId: otid,
            targetUID: target, targetAuthentication: "firebase re-auth + email OTP to the address on file",
            ownershipEvidence: "Apple order id MK7Q2X9P looked up in App Store Connect")
    }

    func head() throws -> UInt64 { try ledger.store.head().sequence }

    /// Removes `staff`: proposed by root, co-signed by ann.
    func remove(_ staff: String, at: Int64) throws {
        let proposal = try ledger.removeStaff(staff, administrator: "root", administratorKey: root, at: at)
        #expect(proposal.step == "propose")
        let removal = try ledger.coSignRosterChange(digest: try #require(proposal.changeDigest), administrator: "ann", key: ann, at: at)
        #expect(removal.accepted, "\(removal.refusalReason ?? "")")
    }

    func lastEvent() throws -> LedgerEvent? { try ledger.store.records(from: head()).last?.events.last }

    func activeProducts(_ uid: String, at: Int64) throws -> [String] {
        try ledger.account(uid: uid, at: at).entitlements.filter(\.active).map(\.productId)
    }

    func expectIntact() throws { try ledger.expectIntact() }

    /// Appends events as they are (one record), bypassing every safeguard, then repairs the read models.
    func appendRaw(_ events: [LedgerEvent], at: Int64) throws { try ledger.appendRaw(events, at: at) }

    /// alice owns lineage 1001; olivia requests case `caseId` to move it to bob.
    @discardableResult
    func requested(_ caseId: String = "C-1") throws -> SupportOutcome {
        purchase("alice", "1001", at: t)
        let outcome = try ledger.requestTransfer(input(caseId), operator: "olivia", key: olivia, at: t + day)
        #expect(outcome.accepted, "\(outcome.refusalReason ?? "")")
        return outcome
    }

    /// Expects that applying `caseId` is refused for `check`, appending exactly one refusal record and nothing else.
    func expectApplyRefused(_ caseId: String, check: String, staff: String = "olivia", key: Ed25519PrivateKey? = nil) throws {
        let before = try head()
        let binding = try ledger.binding(originalTransactionId: "1001").binding
        let outcome = try ledger.applyTransfer(caseId: caseId, staff: staff, key: key ?? olivia, at: t + 3 * day)
        #expect(!outcome.accepted)
        #expect(outcome.checks.contains { $0.name == check && !$0.passed }, "\(outcome.refusalReason ?? "accepted")")
        #expect(try head() == before + 1)
        guard case .transferRefused(let refusal) = try lastEvent() else {
            Issue.record("the last event is not a refusal")
            return
        }
        #expect(refusal.caseId == caseId)
        #expect(refusal.step == "apply")
        #expect(refusal.reason.contains(check))
        #expect(try ledger.binding(originalTransactionId: "1001").binding == binding)
        try expectIntact()
    }

    // MARK: Dry run and refusals

    @Test func dryRunPrintsEverySafeguardAndAppendsNothing() throws {
        defer { directory.remove() }
        let request = try requested()
        _ = try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day)
        let before = try head()
        let review = try ledger.reviewTransfer(caseId: "C-1")
        #expect(try head() == before)
        #expect(review.accepted)
        #expect(review.appended.isEmpty)
        #expect(review.plan == request.plan)
        #expect(review.planDigest == request.planDigest)
        #expect(review.requestedBy == "olivia")
        #expect(review.approvedBy == "adam")
        #expect(review.targetUID == "bob")
        #expect(review.sourceUID == "alice")
        let names = Set(review.checks.map(\.name))
        for check in [
            "operator-enrolled", "operator-signature", "approver-enrolled", "approver-independent", "approver-signature", "plan-not-stale",
            "target-not-staff",
        ] {
            #expect(names.contains(check))
        }
        // What would change: the old entitlement ends, the lineage is rebound; nothing is granted.
        #expect(review.effects.count == 2)
        #expect(!review.effects.contains { if case .entitlementGranted = $0 { return true } else { return false } })
        #expect(try activeProducts("alice", at: t + 2 * day) == ["com.myrecipes.premium.monthly"])
    }

    @Test func applyWithoutApprovalIsRefused() throws {
        defer { directory.remove() }
        try requested()
        try expectApplyRefused("C-1", check: "approved")
    }

    @Test func selfApprovalIsRefusedEvenForSomeoneHoldingBothRoles() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let request = try ledger.requestTransfer(input("C-2"), operator: "pat", key: pat, at: t + day)
        #expect(request.accepted)
        let before = try head()
        let approval = try ledger.approveReviewed(caseId: "C-2", approver: "pat", key: pat, at: t + 2 * day)
        #expect(!approval.accepted)
        #expect(approval.checks.first { $0.name == "approver-independent" }?.passed == false)
        #expect(approval.checks.first { $0.name == "approver-enrolled" }?.passed == true)
        #expect(try head() == before + 1)
        guard case .transferRefused(let refusal) = try lastEvent() else {
            Issue.record("no refusal recorded")
            return
        }
        #expect(refusal.step == "approve")
        #expect(refusal.reason.contains("can never approve their own request"))
        try expectApplyRefused("C-2", check: "approved", staff: "pat", key: pat)
        // A self-approval written straight into the log is refused at apply, and flagged by the checker.
        let digest = try #require(request.planDigest)
        try appendRaw(
            [.transferApproved(TransferApproved(caseId: "C-2", planDigest: digest, approvedBy: "pat", signature: try pat.sign(digest.bytes)))],
            at: t + 2 * day)
        let before2 = try head()
        let outcome = try ledger.applyTransfer(caseId: "C-2", staff: "pat", key: pat, at: t + 3 * day)
        #expect(!outcome.accepted)
        #expect(outcome.checks.first { $0.name == "approver-independent" }?.passed == false)
        #expect(try head() == before2 + 1)
    }

    @Test func unenrolledApproverIsRefused() throws {
        defer { directory.remove() }
        let request = try requested()
        let mallory = try Ed25519PrivateKey.generate()
        let approval = try ledger.approveReviewed(caseId: "C-1", approver: "mallory", key: mallory, at: t + 2 * day)
        #expect(!approval.accepted)
        #expect(approval.checks.first { $0.name == "approver-enrolled" }?.passed == false)
        let digest = try #require(request.planDigest)
        try appendRaw(
            [
                .transferApproved(
                    TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "mallory", signature: try mallory.sign(digest.bytes)))
            ], at: t + 2 * day)
        try expectApplyRefused("C-1", check: "approver-enrolled")
    }

    @Test func removedApproverCanNeitherApproveNorApply() throws {
        defer { directory.remove() }
        try requested()
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        try remove("adam", at: t + 2 * day)
        try expectApplyRefused("C-1", check: "approver-enrolled")
        try expectApplyRefused("C-1", check: "applier-enrolled", staff: "adam", key: adam)
        // A removed approver cannot approve another case either.
        purchase("dave", "1002", at: t)
        _ = try ledger.requestTransfer(input("C-9", otid: "1002", target: "erin"), operator: "olivia", key: olivia, at: t + 3 * day)
        let again = try ledger.approveReviewed(caseId: "C-9", approver: "adam", key: adam, at: t + 3 * day)
        #expect(again.checks.first { $0.name == "approver-enrolled" }?.passed == false)
    }

    /// An approval is tied to the enrolment it was made under: re-enrolling a removed approver (with the same
    /// key, the only way to change roles) does not bring their earlier approvals back.
    @Test func anApprovalDoesNotOutliveTheApproversEnrolment() throws {
        defer { directory.remove() }
        try requested()
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        try remove("adam", at: t + 2 * day)
        let proposal = try ledger.enrollStaff(
            "adam", roles: .approver, publicKey: adam.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root, at: t + 2 * day)
        let enrolled = try ledger.coSignRosterChange(digest: try #require(proposal.changeDigest), administrator: "ann", key: ann, at: t + 2 * day)
        #expect(enrolled.accepted, "\(enrolled.refusalReason ?? "")")
        let review = try ledger.reviewTransfer(caseId: "C-1")
        #expect(review.checks.contains { $0.name == "approval-current-enrolment" && !$0.passed }, "\(review.refusalReason ?? "accepted")")
        try expectApplyRefused("C-1", check: "approval-current-enrolment")
        // A new case, approved under the new enrolment, is applied.
        #expect(try ledger.requestTransfer(input("C-2"), operator: "olivia", key: olivia, at: t + 3 * day).accepted)
        #expect(try ledger.approveReviewed(caseId: "C-2", approver: "adam", key: adam, at: t + 3 * day).accepted)
        let applied = try ledger.applyTransfer(caseId: "C-2", staff: "olivia", key: olivia, at: t + 3 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        try expectIntact()
    }

    @Test func badOrWrongPlanSignaturesAreRefused() throws {
        defer { directory.remove() }
        let request = try requested()
        let digest = try #require(request.planDigest)
        // A key that is not adam's enrolled key is refused at approval.
        let stolen = try Ed25519PrivateKey.generate()
        let approval = try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: stolen, at: t + 2 * day)
        #expect(approval.checks.first { $0.name == "approver-signature" }?.passed == false)
        // Garbage signature bytes.
        try appendRaw(
            [.transferApproved(TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "adam", signature: [UInt8](repeating: 7, count: 64)))],
            at: t + 2 * day)
        try expectApplyRefused("C-1", check: "approver-signature")
        // adam's genuine signature, but over another plan's digest.
        var other = try #require(request.plan)
        other.target = try #require(AccountID([UInt8](repeating: 9, count: 16)))
        let otherDigest = try Ledger.digest(of: other)
        try appendRaw(
            [.transferApproved(TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "adam", signature: try adam.sign(otherDigest.bytes)))],
            at: t + 2 * day)
        try expectApplyRefused("C-1", check: "approver-signature")
        // An approval that names the other plan's digest.
        try appendRaw(
            [
                .transferApproved(
                    TransferApproved(caseId: "C-1", planDigest: otherDigest, approvedBy: "adam", signature: try adam.sign(otherDigest.bytes)))
            ], at: t + 2 * day)
        try expectApplyRefused("C-1", check: "approval-same-plan")
        // A forged operator signature on the request is caught again at apply.
        try appendRaw(
            [.transferApproved(TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "adam", signature: try adam.sign(digest.bytes)))],
            at: t + 2 * day)
        let forged = TransferRequested(
            plan: try #require(request.plan), planDigest: digest, requestedBy: "olivia", signature: try stolen.sign(digest.bytes))
        try appendRaw([.transferRequested(forged)], at: t + 2 * day)
        try appendRaw(
            [.transferApproved(TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "adam", signature: try adam.sign(digest.bytes)))],
            at: t + 2 * day)
        try expectApplyRefused("C-1", check: "operator-signature")
    }

    @Test func stalePlanIsRefused() throws {
        defer { directory.remove() }
        try requested()
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        // alice renews after the plan was signed: the lineage changed.
        purchase("alice", "1001", at: t + 2 * day, type: "renewal", tid: "10010002")
        let review = try ledger.reviewTransfer(caseId: "C-1")
        #expect(review.checks.first { $0.name == "plan-not-stale" }?.passed == false)
        try expectApplyRefused("C-1", check: "plan-not-stale")
    }

    /// Attempts that change nothing (a denied restore by another account, the owner replaying the
    /// transaction it already holds) do not make a plan stale: nobody holding the transaction can
    /// keep a recovery from being applied.
    @Test func attemptsThatChangeNothingDoNotMakeAPlanStale() throws {
        defer { directory.remove() }
        try requested()
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        for _ in 0..<3 {
            #expect(purchase("mallory", "1001", at: t, type: "restore")["code"] as? String == "permission-denied")
            #expect(purchase("alice", "1001", at: t, type: "restore")["decision"] as? String == "granted")
        }
        let review = try ledger.reviewTransfer(caseId: "C-1")
        #expect(review.checks.first { $0.name == "plan-not-stale" }?.passed == true, "\(review.checks)")
        let applied = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 3 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "bob")
    }

    /// Staleness is judged from the request's place in the log, not from the version its plan states:
    /// a plan stated under the earlier rule (which also counted attempts that changed nothing, so it
    /// states a higher version) is still refused after a renewal.
    @Test func aPlanStatingAnotherVersionIsStaleAfterARenewal() throws {
        defer { directory.remove() }
        let request = try requested()
        let plan = try #require(request.plan)
        // A second case's plan as an earlier build would have stated it: the lineage's two records
        // (the purchase, case C-1's request) and one denied restore, which that build also counted.
        var earlier = plan
        earlier.caseId = "C-earlier"
        earlier.lineageVersion = plan.lineageVersion + 2
        let digest = try Ledger.digest(of: earlier)
        let signature = try olivia.sign(digest.bytes)
        let earlierRequest = TransferRequested(plan: earlier, planDigest: digest, requestedBy: "olivia", signature: signature)
        try appendRaw([.transferRequested(earlierRequest)], at: t + day)
        #expect(try ledger.approveReviewed(caseId: "C-earlier", approver: "adam", key: adam, at: t + 2 * day).accepted)
        purchase("alice", "1001", at: t + 2 * day, type: "renewal", tid: "10010002")
        let review = try ledger.reviewTransfer(caseId: "C-earlier")
        #expect(review.checks.first { $0.name == "plan-not-stale" }?.passed == false, "\(review.checks)")
    }

    @Test func targetCannotBeAStaffMembersOwnAccount() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let before = try head()
        let outcome = try ledger.requestTransfer(input("C-3", target: "pat-personal"), operator: "olivia", key: olivia, at: t + day)
        #expect(!outcome.accepted)
        #expect(outcome.checks.first { $0.name == "target-not-staff" }?.passed == false)
        #expect(try head() == before + 1)
        guard case .transferRefused = try lastEvent() else {
            Issue.record("no refusal recorded")
            return
        }
    }

    @Test func rosterChangesNeedAnEnrolledAdministratorsSignature() throws {
        defer { directory.remove() }
        let before = try head()
        let mallory = try Ed25519PrivateKey.generate()
        #expect(throws: SupportRefusal.self) {
            try ledger.enrollStaff(
                "mallory", roles: .approver, publicKey: mallory.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: mallory)
        }
        #expect(throws: SupportRefusal.self) {
            try ledger.enrollStaff(
                "mallory", roles: .approver, publicKey: mallory.publicKey, ownAccountUID: nil, administrator: "olivia", administratorKey: olivia)
        }
        #expect(throws: SupportRefusal.self) {
            try ledger.enrollStaff(
                "olivia2", roles: .approver, publicKey: olivia.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root)
        }
        #expect(throws: SupportRefusal.self) { try ledger.enrollFirstAdministrator("eve", publicKey: mallory.publicKey) }
        #expect(try head() == before)
    }

    /// With two administrators, one alone only proposes; a second, different administrator's
    /// signature over the same change applies it, once. Back to one administrator, only a second
    /// administrator can be enrolled (the bootstrap).
    @Test func rosterChangesNeedTwoAdministratorsAfterTheBootstrap() throws {
        defer { directory.remove() }
        let cy = try Ed25519PrivateKey.generate()
        let proposal = try ledger.enrollStaff(
            "cy", roles: .operator_, publicKey: cy.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root, at: t)
        #expect(proposal.step == "propose")
        #expect(proposal.appended.map(\.name) == ["roster-change-proposed"])
        let digest = try #require(proposal.changeDigest)
        // Not enrolled yet: cy cannot request.
        purchase("alice", "1001", at: t)
        #expect(
            try ledger.requestTransfer(input("C-1"), operator: "cy", key: cy, at: t + day).checks.contains {
                $0.name == "operator-enrolled" && !$0.passed
            })
        // The review shows the change and appends nothing.
        let before = try head()
        let review = try ledger.reviewRosterChange(digest: digest)
        #expect(review.accepted)
        #expect(review.checks.contains { $0.name == "second-administrator" })
        #expect(review.step == "review-change")
        #expect(review.rosterChange?.staff == "cy")
        #expect(try head() == before)
        // root cannot co-sign their own proposal; olivia is no administrator; an unknown digest names nothing.
        for (admin, key, check) in [("root", root, "co-administrator-independent"), ("olivia", olivia, "co-administrator-enrolled")] {
            do {
                _ = try ledger.coSignRosterChange(digest: digest, administrator: admin, key: key, at: t)
                Issue.record("\(admin) co-signed")
            } catch let refusal as SupportRefusal {
                #expect(refusal.outcome.checks.contains { $0.name == check && !$0.passed }, "\(refusal)")
            }
        }
        #expect(throws: SupportRefusal.self) { try ledger.coSignRosterChange(digest: .zero, administrator: "ann", key: ann, at: t) }
        // ann signs with a key that is not hers.
        #expect(throws: SupportRefusal.self) { try ledger.coSignRosterChange(digest: digest, administrator: "ann", key: mallory(), at: t) }
        #expect(try head() == before)
        let cosigned = try ledger.coSignRosterChange(digest: digest, administrator: "ann", key: ann, at: t)
        #expect(cosigned.accepted, "\(cosigned.refusalReason ?? "")")
        guard case .staffEnrolled(let enrolled)? = cosigned.appended.first else {
            Issue.record("no enrolment appended")
            return
        }
        #expect(enrolled.enrolledBy == "root")
        #expect(enrolled.coSignedBy == "ann")
        #expect(try ledger.requestTransfer(input("C-1"), operator: "cy", key: cy, at: t + day).accepted)
        // The same proposal cannot be co-signed twice.
        #expect(throws: SupportRefusal.self) { try ledger.coSignRosterChange(digest: digest, administrator: "ann", key: ann, at: t) }
        // root leaves (root proposes, ann co-signs); ann alone may only enrol a second administrator.
        let leaving = try ledger.removeStaff("root", administrator: "root", administratorKey: root, at: t)
        _ = try ledger.coSignRosterChange(digest: try #require(leaving.changeDigest), administrator: "ann", key: ann, at: t)
        let dee = try Ed25519PrivateKey.generate()
        do {
            _ = try ledger.enrollStaff(
                "dee", roles: .approver, publicKey: dee.publicKey, ownAccountUID: nil, administrator: "ann", administratorKey: ann, at: t)
            Issue.record("a single administrator enrolled an approver")
        } catch let refusal as SupportRefusal {
            #expect(refusal.outcome.checks.contains { $0.name == "bootstrap" && !$0.passed })
        }
        #expect(throws: SupportRefusal.self) { try ledger.removeStaff("ann", administrator: "ann", administratorKey: ann, at: t) }
        let second = try ledger.enrollStaff(
            "dee", roles: .administrator, publicKey: dee.publicKey, ownAccountUID: nil, administrator: "ann", administratorKey: ann, at: t)
        #expect(second.step == "enroll")
        #expect(second.accepted)
        try expectIntact()
        let audit = try ledger.audit().records.filter { $0.entry.kind == "staff-enrolled" || $0.entry.kind == "staff-removed" }
        #expect(audit.filter { !$0.isValid }.isEmpty)
        #expect(audit.last?.coSignature == "not-required-bootstrap")
        #expect(audit.contains { $0.entry.staff == "cy" && $0.coSigner == "ann" && $0.coSignature == "valid" })
    }

    func mallory() throws -> Ed25519PrivateKey { try Ed25519PrivateKey.generate() }

    /// The approver pins the plan they reviewed: another digest is refused and recorded.
    @Test func anApprovalOfAnotherPlanDigestIsRefused() throws {
        defer { directory.remove() }
        let request = try requested()
        let other = try Ledger.digest(of: Array("another plan".utf8))
        let before = try head()
        let approval = try ledger.approveTransfer(caseId: "C-1", approver: "adam", key: adam, planDigest: other, at: t + 2 * day)
        #expect(!approval.accepted)
        let check = try #require(approval.checks.first { $0.name == "approval-same-plan" })
        #expect(!check.passed)
        #expect(check.detail.contains(other.hex) && check.detail.contains(request.planDigest?.hex ?? "?"))
        #expect(try head() == before + 1)
        guard case .transferRefused(let refusal) = try lastEvent() else {
            Issue.record("no refusal recorded")
            return
        }
        #expect(refusal.lineage == request.plan?.lineage)
        let reviewed = try #require(request.planDigest)
        #expect(try ledger.approveTransfer(caseId: "C-1", approver: "adam", key: adam, planDigest: reviewed).accepted)
    }

    /// Every apply is signed by its applier; audit and verify check it, and a forged one is flagged.
    @Test func theApplyIsSignedAndCheckedByAuditAndVerify() throws {
        defer { directory.remove() }
        let request = try requested()
        _ = try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day)
        let applied = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 3 * day)
        guard case .transferApplied(let event)? = applied.appended.last else {
            Issue.record("not applied: \(applied.refusalReason ?? "")")
            return
        }
        #expect(try olivia.publicKey.isValidSignature(event.signature, for: event.signedMessage))
        #expect(try ledger.audit().records.first { $0.entry.kind == "transfer-applied" }?.signature == "valid")
        try expectIntact()
        // The same apply recorded again, signed by adam in olivia's name.
        var forged = event
        forged.signature = try adam.sign(event.signedMessage)
        try appendRaw([.transferApplied(forged)], at: t + 4 * day)
        #expect(try ledger.audit().records.last { $0.entry.kind == "transfer-applied" }?.signature == "invalid")
        let violations = try ledger.store.replay().violations
        let last = try head()
        #expect(violations.contains { $0.sequence == last && $0.message.contains("apply signature") })
        #expect(request.accepted)
    }

    // MARK: Recovery

    @Test func recoveryFromALiveAccountEndsTheOldEntitlementAndTheOldRestoreIsDenied() throws {
        defer { directory.remove() }
        try requested()
        #expect(try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day).accepted)
        let applied = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 3 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        #expect(applied.appended.count == 2)
        let lineage = try ledger.lineage(originalTransactionId: "1001")
        let alice = try #require(try ledger.pseudonym(ofUID: "alice"))
        #expect(applied.appended.first == .entitlementEnded(lineage: lineage, account: alice, reason: .transferred))
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "bob")
        #expect(try activeProducts("alice", at: t + 4 * day) == [])
        #expect(try activeProducts("bob", at: t + 4 * day) == [])
        let oldRestore = purchase("alice", "1001", at: t + 5 * day, type: "restore")
        #expect(oldRestore["code"] as? String == "permission-denied")
        #expect(try activeProducts("alice", at: t + 5 * day) == [])
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "bob")
        // Applying twice is refused.
        let twice = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 6 * day)
        #expect(twice.checks.first { $0.name == "not-applied" }?.passed == false)
        try expectIntact()
    }

    @Test func recoveryFromADeletionTombstoneRebindsAndNeverGrantsUntilAVerifiedRestore() throws {
        defer { directory.remove() }
        purchase("carol", "1001", at: t)
        send(["type": "delete-account", "account": "carol", "at": t + day])
        #expect(try ledger.binding(originalTransactionId: "1001").state == "tombstoned")
        let request = try ledger.requestTransfer(input("C-4", target: "carol2"), operator: "pat", key: pat, at: t + 2 * day)
        #expect(request.accepted)
        guard case .tombstoned = request.plan?.source else {
            Issue.record("the plan does not start from the tombstone")
            return
        }
        #expect(try ledger.approveReviewed(caseId: "C-4", approver: "adam", key: adam, at: t + 2 * day).accepted)
        let applied = try ledger.applyTransfer(caseId: "C-4", staff: "adam", key: adam, at: t + 3 * day)
        #expect(applied.accepted, "\(applied.refusalReason ?? "")")
        #expect(applied.appended.count == 1)
        let binding = try ledger.binding(originalTransactionId: "1001", at: t + 3 * day)
        #expect(binding.state == "bound")
        #expect(binding.uid == "carol2")
        #expect(binding.entitlement == nil)
        #expect(try activeProducts("carol2", at: t + 3 * day) == [])
        // A server notification grants nothing; the verified restore on the target does.
        let restore = purchase("carol2", "1001", at: t + 4 * day, type: "restore", tid: "10010004")
        #expect(restore["decision"] as? String == "granted")
        #expect(try activeProducts("carol2", at: t + 5 * day) == ["com.myrecipes.premium.monthly"])
        #expect(purchase("someone-else", "1001", at: t + 5 * day, type: "restore")["code"] as? String == "permission-denied")
        try expectIntact()
    }

    // MARK: Audit and invariants

    @Test func auditTrailReplaysToTheSameContentAndEverySignatureVerifies() throws {
        defer { directory.remove() }
        try requested()
        _ = try ledger.approveReviewed(caseId: "C-1", approver: "olivia", key: olivia, at: t + 2 * day)
        _ = try ledger.approveReviewed(caseId: "C-1", approver: "adam", key: adam, at: t + 2 * day)
        _ = try ledger.applyTransfer(caseId: "C-1", staff: "olivia", key: olivia, at: t + 3 * day)
        let trail = try ledger.audit().records
        let kinds = trail.map(\.entry.kind)
        for kind in ["staff-enrolled", "transfer-requested", "transfer-refused", "transfer-approved", "transfer-applied"] {
            #expect(kinds.contains(kind))
        }
        for record in trail where record.signature != nil {
            #expect(["valid", "unsigned-first-administrator"].contains(record.signature ?? ""), "\(record.entry)")
            #expect(record.isValid, "\(record.entry)")
        }
        // ann's enrolment (the bootstrap), 3 proposals and their co-signed enrolments, request, approval, apply.
        #expect(trail.filter { $0.signature == "valid" }.count == 10)
        #expect(trail.filter { $0.coSignature == "valid" }.count == 3)
        let reopened = try Ledger(opening: ledger.store.location)
        #expect(try reopened.audit().records.map(\.entry) == trail.map(\.entry))
        #expect(try reopened.audit().records.map(\.signature) == trail.map(\.signature))
        let byCase = try ledger.audit(caseId: "C-1").records
        #expect(byCase.map(\.entry.kind) == ["transfer-requested", "transfer-refused", "transfer-approved", "transfer-applied"])
        #expect(try ledger.audit(originalTransactionId: "1001").records.map(\.entry.kind).contains("transfer-refused"))
        #expect(byCase.first?.entry.reason.contains("ticket 4711") == true)
    }

    @Test func invariantCheckerFlagsAnAppliedTransferWithoutAValidApproval() throws {
        defer { directory.remove() }
        let request = try requested()
        let digest = try #require(request.planDigest)
        let plan = try #require(request.plan)
        let alice = plan.source.account
        try appendRaw(
            [
                .entitlementEnded(lineage: plan.lineage, account: alice, reason: .transferred),
                .transferApplied(
                    TransferApplied(
                        caseId: "C-1", planDigest: digest, lineage: plan.lineage, source: plan.source, target: plan.target, appliedBy: "olivia")),
            ], at: t + 3 * day)
        let violations = try ledger.store.replay().violations
        #expect(violations.contains { $0.invariant == 5 && $0.message.contains("approval") })
    }

    @Test func replayFlagsAnApprovalWhoseSignatureIsForged() throws {
        defer { directory.remove() }
        let request = try requested()
        let digest = try #require(request.planDigest)
        let plan = try #require(request.plan)
        // A well-formed approval by an enrolled approver, but signed with somebody else's key.
        let forged = try Ed25519PrivateKey.generate().sign(digest.bytes)
        try appendRaw(
            [
                .transferApproved(TransferApproved(caseId: "C-1", planDigest: digest, approvedBy: "adam", signature: forged)),
                .entitlementEnded(lineage: plan.lineage, account: plan.source.account, reason: .transferred),
                .transferApplied(
                    TransferApplied(
                        caseId: "C-1", planDigest: digest, lineage: plan.lineage, source: plan.source, target: plan.target, appliedBy: "olivia")),
            ], at: t + 3 * day)
        let report = try ledger.store.replay()
        let applied = try head()
        #expect(report.violations.contains { $0.invariant == 5 && $0.sequence == applied && $0.message.contains("approval") })
        // Without the signature checks the same history looks authorised: the signatures are what catch it.
        #expect(try !InvariantChecker.check(try ledger.store.records()).contains { $0.invariant == 5 })
    }

    /// Only the roster's first member is enrolled unsigned: an unsigned enrolment written later (by
    /// someone rewriting the store) is an invalid audit entry, not a second root of trust.
    @Test func anUnsignedEnrolmentAfterTheFirstAdministratorIsInvalidInTheAudit() throws {
        defer { directory.remove() }
        let mallory = try Ed25519PrivateKey.generate()
        let unsigned = StaffEnrolled(
            staff: "mallory", roles: .approver, publicKey: mallory.publicKey.rawRepresentation, ownAccount: nil, enrolledBy: nil, signature: [])
        try appendRaw([.staffEnrolled(unsigned)], at: t)
        let report = try ledger.audit()
        #expect(report.records.first { $0.entry.kind == "staff-enrolled" }?.signature == "unsigned-first-administrator")
        #expect(report.records.last { $0.entry.kind == "staff-enrolled" }?.signature == "invalid")
        #expect(!report.isValid)
        #expect(report.chainFault == nil)
    }

    // MARK: The runbook through the binary

    @Test func runbookThroughTheLedgerBinary() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-support-cli")
        defer { dir.remove() }
        let store = dir.path("store").path
        func ledger(_ arguments: [String], stdin: String = "") throws -> LedgerBinary.Result {
            try LedgerBinary.run(arguments + ["--store", store], stdin: stdin)
        }
        func key(_ name: String) -> String { dir.path("\(name).key").path }
        // Customer identifiers long enough that the privacy check at the end cannot match the store's random bytes by chance.
        let (carol, carol2, otid) = ("uid-runbook-carol-7f3a9c", "uid-runbook-carol2-7f3a9c", "2000000000005001")
        for name in ["root", "ann", "olivia", "adam"] {
            let generated = try LedgerBinary.run(["support", "keygen", "--out", key(name)])
            #expect(generated.status == 0, "\(generated.stderr)")
            #expect((generated.json["publicKey"] as? String)?.contains("BEGIN PUBLIC KEY") == true)
        }
        let mode = try FileManager.default.attributesOfItem(atPath: key("root"))[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let initialised = try ledger([
            "init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", "root", "--admin-public-key", key("root") + ".pub",
        ])
        #expect(initialised.status == 0, "\(initialised.stderr)")
        #expect(initialised.json["administrator"] as? String == "root")
        // The bootstrap: root alone enrols the second administrator; then each change is proposed by
        // one administrator and co-signed by the other (ann's key read from standard input).
        let second = try ledger([
            "support", "enroll", "--staff", "ann", "--roles", "administrator", "--public-key", key("ann") + ".pub", "--admin", "root",
            "--admin-key", key("root"),
        ])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.json["step"] as? String == "enroll")
        for (staff, roles) in [("olivia", "operator"), ("adam", "approver")] {
            let proposed = try ledger([
                "support", "enroll", "--staff", staff, "--roles", roles, "--public-key", key(staff) + ".pub", "--admin", "root", "--admin-key",
                key("root"), "--own-account", "\(staff)-personal",
            ])
            #expect(proposed.status == 0, "\(proposed.stderr)")
            #expect(proposed.json["step"] as? String == "propose")
            let change = try #require(proposed.json["changeDigest"] as? String)
            #expect((proposed.json["note"] as? String)?.contains("ledger support cosign --change \(change)") == true)
            let review = try ledger(["support", "cosign", "--change", change])
            #expect(review.status == 0, "\(review.stderr)")
            #expect((review.json["change"] as? [String: Any])?["staff"] as? String == staff)
            let cosigned = try ledger(
                ["support", "cosign", "--change", change, "--admin", "ann", "--admin-key", "-"],
                stdin: try String(contentsOfFile: key("ann"), encoding: .utf8))
            #expect(cosigned.status == 0, "\(cosigned.stderr)")
            #expect(cosigned.json["appended"] as? [String] == ["staff-enrolled"])
        }
        let forged = try ledger([
            "support", "enroll", "--staff", "eve", "--roles", "approver", "--public-key", key("adam") + ".pub", "--admin", "olivia", "--admin-key",
            key("olivia"),
        ])
        #expect(forged.status == 1)
        let lines: [[String: Any]] = [
            ["type": "purchase", "account": carol, "transaction": Fixtures.transaction(otid, at: t), "at": t],
            ["type": "delete-account", "account": carol, "at": t + day],
        ]
        #expect(try ledger(["submit", "--trust-decoded"], stdin: lines.map(Fixtures.line).joined(separator: "\n") + "\n").status == 0)
        let request = try ledger([
            "support", "request", "--case", "CASE-7", "--reason", "customer deleted the account and signed up again",
            "--original-transaction-id", otid, "--environment", "Sandbox", "--target-account", carol2, "--target-auth",
            "firebase re-auth + email OTP", "--evidence", "Apple order id MK7Q2X9P", "--operator", "olivia", "--key", key("olivia"),
        ])
        #expect(request.status == 0, "\(request.stderr)")
        let digest = try #require(request.json["planDigest"] as? String)
        let selfApproval = try ledger([
            "support", "approve", "--case", "CASE-7", "--plan-digest", digest, "--approver", "olivia", "--key", key("olivia"),
        ])
        #expect(selfApproval.status == 1)
        #expect(selfApproval.stderr.contains("refused"))
        let otherPlan = String(repeating: "ab", count: 32)
        let wrongPlan = try ledger(["support", "approve", "--case", "CASE-7", "--plan-digest", otherPlan, "--approver", "adam", "--key", key("adam")])
        #expect(wrongPlan.status == 1)
        #expect(wrongPlan.stderr.contains("approval-same-plan"), "\(wrongPlan.stderr)")
        #expect(
            try ledger(["support", "approve", "--case", "CASE-7", "--plan-digest", "abc", "--approver", "adam", "--key", key("adam")]).status == 2)
        let review = try ledger(["support", "transfer", "--case", "CASE-7"])
        #expect((review.json["note"] as? String)?.contains("--plan-digest \(digest)") == true, "\(review.stdout)")
        let approval = try ledger(["support", "approve", "--case", "CASE-7", "--plan-digest", digest, "--approver", "adam", "--key", key("adam")])
        #expect(approval.status == 0, "\(approval.stderr)")
        #expect(approval.json["planDigest"] as? String == digest)
        let before = try ledger(["stats"]).json["records"] as? Int
        let dryRun = try ledger(["support", "transfer", "--case", "CASE-7"])
        #expect(dryRun.status == 0, "\(dryRun.stderr)")
        #expect(dryRun.json["step"] as? String == "dry-run")
        #expect(dryRun.json["requestedBy"] as? String == "olivia")
        #expect(dryRun.json["approvedBy"] as? String == "adam")
        #expect((dryRun.json["wouldChange"] as? [String])?.contains { $0.contains("grant nothing") } == true)
        #expect(try ledger(["stats"]).json["records"] as? Int == before)
        let applied = try ledger(["support", "transfer", "--case", "CASE-7", "--apply", "--staff", "olivia", "--key", key("olivia")])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect((applied.json["note"] as? String)?.contains("Restore Purchases") == true)
        let again = try ledger(["support", "transfer", "--case", "CASE-7", "--apply", "--staff", "olivia", "--key", key("olivia")])
        #expect(again.status == 1)
        let binding = try ledger(["binding", "--original-transaction-id", otid])
        #expect(binding.json["state"] as? String == "bound")
        #expect(binding.json["account"] as? String == carol2)
        #expect(binding.json["entitlement"] is NSNull)
        let restore: [String: Any] = [
            "type": "restore", "account": carol2, "transaction": Fixtures.transaction(otid, transactionId: "2000000050010002", at: t + 2 * day),
            "at": t + 2 * day,
        ]
        let restored = try ledger(["submit", "--trust-decoded"], stdin: Fixtures.line(restore) + "\n")
        #expect(restored.json["decision"] as? String == "granted")
        let audit = try ledger(["audit"])
        #expect(audit.status == 0, "\(audit.stderr)")
        let entries = audit.lines.map(Fixtures.object)
        #expect(entries.compactMap { $0["signature"] as? String }.allSatisfy { $0 == "valid" || $0 == "unsigned-first-administrator" })
        #expect(entries.compactMap { $0["coSignature"] as? String } == ["not-required-bootstrap", "valid", "valid"])
        #expect(entries.first { $0["kind"] as? String == "transfer-applied" }?["signedBy"] as? String == "olivia")
        #expect(try ledger(["audit"]).stdout == audit.stdout)
        let byCase = try ledger(["audit", "--case", "CASE-7"]).lines.map { Fixtures.object($0)["kind"] as? String ?? "" }
        #expect(
            byCase == ["transfer-requested", "transfer-refused", "transfer-refused", "transfer-approved", "transfer-applied", "transfer-refused"])
        let verify = try ledger(["verify"])
        #expect(verify.status == 0, "\(verify.stdout)")
        // No customer UID or Apple transaction id of the scenario is anywhere in the store.
        for secret in [carol, carol2, "olivia-personal", "adam-personal", otid, "2000000050010002"] {
            #expect(try !Fixtures.anyFile(in: dir.path("store"), contains: secret), "\(secret) is in the store")
        }
    }

    // MARK: Customer identifiers in free text (privacy)

    @Test func requestRefusesCustomerIdentifiersInItsFreeTextBeforeRecordingAnything() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let before = try head()
        let identifiers = ["bob", "alice", "1001"]  // target UID, current owner's UID, original transaction id
        let fields: [(SupportInputError.Field, WritableKeyPath<TransferRequestInput, String>)] = [
            (.reason, \.reason), (.targetAuthentication, \.targetAuthentication), (.ownershipEvidence, \.ownershipEvidence),
            (.caseId, \.caseId),
        ]
        for (field, path) in fields {
            for identifier in identifiers {
                var request = input("C-1")
                request[keyPath: path] = field == .caseId ? "C-\(identifier)" : "text mentioning \(identifier) in passing"
                do {
                    _ = try ledger.requestTransfer(request, operator: "olivia", key: olivia, at: t + day)
                    Issue.record("\(field) holding \(identifier) was accepted")
                } catch let error as SupportInputError {
                    #expect(error.field == field)
                    #expect(error.description.contains(field.rawValue))
                    #expect(error.description.contains("customer identifiers"))
                    #expect(!error.description.contains(identifier), "the message repeats the identifier")
                }
            }
        }
        // Written in another case or spaced out, a long number of any kind, an email address.
        let disguised = ["BOB", "Al-ice", "1 0 0 1", "order 2000 0000 0000 0066", "txn 2000000000000066", "mail hank@example.com"]
        for text in disguised {
            var request = input("C-1")
            request.reason = "customer says \(text) today"
            do {
                _ = try ledger.requestTransfer(request, operator: "olivia", key: olivia, at: t + day)
                Issue.record("a reason holding \(text) was accepted")
            } catch let error as SupportInputError {
                #expect(error.field == .reason)
                #expect(error.description.contains("customer identifiers"), "\(error)")
            }
        }
        #expect(try head() == before)
        // The transaction was aborted: not even the target's pseudonym was kept.
        #expect(try ledger.pseudonym(ofUID: "bob") == nil)
        // The same request without identifiers goes through.
        #expect(try ledger.requestTransfer(input("C-1"), operator: "olivia", key: olivia, at: t + day).accepted)
        try expectIntact()
    }

    @Test func supportRecoveryInTheDemoWritesNoCustomerIdentifierToTheStore() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-support-demo")
        defer { dir.remove() }
        // The demo's UIDs are short names: four demo stores, each with its own keys, are searched, and a
        // UID counts as written only when it is in all four (a chance match in one store's random
        // bytes is not; Fixtures.anyFile(inEach:contains:)).
        let stores = (1...4).map { dir.path("store-\($0)") }
        for store in stores {
            let demo = try LedgerBinary.run(["demo", "--store", store.path])
            #expect(demo.status == 0, "\(demo.stderr)")
            #expect(demo.stdout.contains("olivia applies the transfer"))
        }
        for uid in ["carol", "carol2", "alice", "bob", "erin"] {
            #expect(try !Fixtures.anyFile(inEach: stores, contains: uid), "\(uid) is in the demo stores")
        }
        // The log itself holds no Apple transaction id either (the dispute bundle beside it names its lineage).
        let data = try Data(contentsOf: dir.path("store-1/data.mdb"))
        for id in ["2000000000000001", "2000000000000002", "2000000000000003", "2000000000000101", "2000000000000202"] {
            #expect(data.range(of: Data(id.utf8)) == nil, "\(id) is in data.mdb")
        }
    }

    @Test func requestNamingTheCustomerIsRefusedThroughTheBinaryAndRecordsNothing() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-support-privacy")
        defer { dir.remove() }
        let store = dir.path("store").path
        let keyFile = dir.path("root.key").path
        #expect(try LedgerBinary.run(["support", "keygen", "--out", keyFile]).status == 0)
        let created = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", "root", "--admin-public-key",
            keyFile + ".pub",
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let line = Fixtures.line([
            "type": "purchase", "account": "dana-uid-7f3a9c-77", "transaction": Fixtures.transaction("2000000000008001", at: t), "at": t,
        ])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: line + "\n").status == 0)
        let records = try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int
        for (option, text) in [
            ("reason", "dana-uid-7f3a9c-77 lost access"), ("target-auth", "re-auth of dana-uid-7f3a9c-78"),
            ("evidence", "transaction 2000000000008001 in App Store Connect"),
        ] {
            var freeText = ["reason": "lost access", "target-auth": "re-auth", "evidence": "order lookup"]
            freeText[option] = text
            let arguments =
                [
                    "support", "request", "--store", store, "--case", "CASE-1", "--original-transaction-id", "2000000000008001", "--environment",
                    "Sandbox",
                    "--target-account", "dana-uid-7f3a9c-78", "--operator", "root", "--key", keyFile,
                ] + freeText.sorted(by: { $0.key < $1.key }).flatMap { ["--\($0.key)", $0.value] }
            let refused = try LedgerBinary.run(arguments)
            #expect(refused.status == 2, "\(refused.stderr)")
            #expect(refused.stderr.contains("--\(option)"), "\(refused.stderr)")
            #expect(refused.stderr.contains("customer identifiers"), "\(refused.stderr)")
        }
        #expect(try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int == records)
        for secret in ["dana-uid-7f3a9c-77", "dana-uid-7f3a9c-78", "2000000000008001"] {
            #expect(try !Fixtures.anyFile(in: dir.path("store"), contains: secret), "\(secret) is in the store")
        }
    }

    /// The ledger's own signing public key is published and signs for nobody: enrolling it as a staff key
    /// is refused (the bootstrap and a proposal alike), and nothing is appended.
    @Test func theLedgerSigningKeyIsNeverEnrolledThroughTheBinary() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-support-signing-key")
        defer { dir.remove() }
        let store = ["--store", dir.path("store").path, "--keys", dir.path("keys").path]
        let root = dir.path("root.key").path
        let ann = dir.path("ann.key").path
        let signing = dir.path("signing.pub").path
        for key in [root, ann] { #expect(try LedgerBinary.run(["support", "keygen", "--out", key]).status == 0) }
        let created = try LedgerBinary.run(
            ["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", "root", "--admin-public-key", root + ".pub"] + store)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try LedgerBinary.run(["signing-key", "--out", signing] + store).status == 0)
        func enroll(_ staff: String, _ roles: String, _ publicKey: String) throws -> LedgerBinary.Result {
            try LedgerBinary.run(
                ["support", "enroll", "--staff", staff, "--roles", roles, "--public-key", publicKey, "--admin", "root", "--admin-key", root]
                    + store)
        }
        func records() throws -> Int? { try LedgerBinary.run(["stats"] + store).json["records"] as? Int }
        func expectRefused(_ roles: String) throws {
            let before = try records()
            let refused = try enroll("ghost", roles, signing)
            #expect(refused.status == 1, "\(refused.stdout)")
            #expect(refused.stderr.contains("key-unique: the public key is the ledger's own signing key"), "\(refused.stderr)")
            #expect(try records() == before)
        }
        try expectRefused("administrator")  // the bootstrap
        #expect(try enroll("ann", "administrator", ann + ".pub").status == 0)
        try expectRefused("approver")  // with two administrators: not even proposed
    }

    // MARK: Case and staff ids

    @Test func caseAndStaffIdsMustBeShortPrintableTokens() throws {
        defer { directory.remove() }
        purchase("alice", "1001", at: t)
        let before = try head()
        let long = String(repeating: "x", count: 600)
        for bad in ["", long, "C 1", "C-1\n", "C\u{7}1", "Cé1", String(repeating: "x", count: Ledger.maxIdentifierBytes + 1)] {
            func expectRefused(_ field: SupportInputError.Field, _ body: () throws -> Void) {
                do {
                    try body()
                    Issue.record("\(field) \(bad.debugDescription) was accepted")
                } catch let error as SupportInputError {
                    #expect(error.field == field)
                    #expect(error.description.contains(field.rawValue))
                } catch {
                    Issue.record("\(field) \(bad.debugDescription): \(error)")
                }
            }
            expectRefused(.caseId) { _ = try ledger.requestTransfer(input(bad), operator: "olivia", key: olivia, at: t + day) }
            expectRefused(.operator_) { _ = try ledger.requestTransfer(input("C-1"), operator: bad, key: olivia, at: t + day) }
            expectRefused(.caseId) { _ = try ledger.approveReviewed(caseId: bad, approver: "adam", key: adam, at: t + day) }
            expectRefused(.approver) { _ = try ledger.approveReviewed(caseId: "C-1", approver: bad, key: adam, at: t + day) }
            expectRefused(.caseId) { _ = try ledger.reviewTransfer(caseId: bad) }
            expectRefused(.caseId) { _ = try ledger.applyTransfer(caseId: bad, staff: "olivia", key: olivia, at: t + day) }
            expectRefused(.staff) { _ = try ledger.applyTransfer(caseId: "C-1", staff: bad, key: olivia, at: t + day) }
            let key = try Ed25519PrivateKey.generate()
            expectRefused(.staff) {
                _ = try ledger.enrollStaff(
                    bad, roles: .approver, publicKey: key.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root, at: t)
            }
            expectRefused(.administrator) {
                _ = try ledger.enrollStaff(
                    "newbie", roles: .approver, publicKey: key.publicKey, ownAccountUID: nil, administrator: bad, administratorKey: root, at: t)
            }
            expectRefused(.staff) { _ = try ledger.removeStaff(bad, administrator: "root", administratorKey: root, at: t) }
            expectRefused(.administrator) { try ledger.enrollFirstAdministrator(bad, publicKey: key.publicKey, at: t) }
        }
        #expect(try head() == before)
        // 128 bytes of printable ASCII is fine.
        let longest = String(repeating: "C", count: Ledger.maxIdentifierBytes)
        let request = try ledger.requestTransfer(input(longest), operator: "olivia", key: olivia, at: t + day)
        #expect(request.accepted, "\(request.refusalReason ?? "")")
        #expect(try ledger.reviewTransfer(caseId: longest).caseId == longest)
        try expectIntact()
    }

    @Test func overlongIdsThroughTheBinaryAreUsageErrorsNamingTheOption() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-support-ids")
        defer { dir.remove() }
        let store = dir.path("store").path
        let keyFile = dir.path("root.key").path
        #expect(try LedgerBinary.run(["support", "keygen", "--out", keyFile]).status == 0)
        let long = String(repeating: "x", count: 600)
        let badAdmin = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", long, "--admin-public-key",
            keyFile + ".pub",
        ])
        #expect(badAdmin.status == 2, "\(badAdmin.stderr)")
        #expect(badAdmin.stderr.contains("--admin"))
        #expect(!FileManager.default.fileExists(atPath: store), "a refused init created the store")
        let created = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--admin", "root", "--admin-public-key",
            keyFile + ".pub",
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let runs: [(String, [String])] = [
            (
                "staff",
                ["enroll", "--staff", long, "--roles", "approver", "--public-key", keyFile + ".pub", "--admin", "root", "--admin-key", keyFile]
            ),
            (
                "admin",
                ["enroll", "--staff", "amy", "--roles", "approver", "--public-key", keyFile + ".pub", "--admin", long, "--admin-key", keyFile]
            ),
            ("staff", ["remove", "--staff", "amy bob", "--admin", "root", "--admin-key", keyFile]),
            (
                "case",
                [
                    "request", "--case", long, "--reason", "lost access", "--original-transaction-id", "8001", "--target-account", "uid-2",
                    "--target-auth", "re-auth", "--evidence", "order lookup", "--operator", "root", "--key", keyFile,
                ]
            ),
            (
                "operator",
                [
                    "request", "--case", "CASE-1", "--reason", "lost access", "--original-transaction-id", "8001", "--target-account", "uid-2",
                    "--target-auth", "re-auth", "--evidence", "order lookup", "--operator", long, "--key", keyFile,
                ]
            ),
            ("case", ["approve", "--case", long, "--plan-digest", String(repeating: "0", count: 64), "--approver", "root", "--key", keyFile]),
            (
                "approver",
                ["approve", "--case", "CASE-1", "--plan-digest", String(repeating: "0", count: 64), "--approver", long, "--key", keyFile]
            ),
            ("case", ["transfer", "--case", long]),
            ("staff", ["transfer", "--case", "CASE-1", "--apply", "--staff", long, "--key", keyFile]),
        ]
        for (option, arguments) in runs {
            let result = try LedgerBinary.run(["support"] + arguments + ["--store", store])
            #expect(result.status == 2, "\(arguments.first ?? ""): \(result.stderr)")
            #expect(result.stderr.contains("--\(option):"), "\(result.stderr)")
            #expect(!result.stderr.contains("MDB_"), "\(result.stderr)")
        }
        #expect(try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int == 1)
    }

    // MARK: ledger init --store

    @Test func initReportsAStorePathThatIsAFileOrCannotBeCreated() throws {
        defer { directory.remove() }
        let dir = TemporaryDirectory("ledger-init-store")
        defer { dir.remove() }
        let file = dir.path("afile").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("not a ledger".utf8)))
        func initialise(_ store: String) throws -> LedgerBinary.Result {
            try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        }
        let onFile = try initialise(file)
        #expect(onFile.status == 3)
        #expect(onFile.stderr.contains("--store \(file) exists and is not a directory"), "\(onFile.stderr)")
        #expect(!onFile.stderr.contains("NSCocoaErrorDomain"))
        let below = try initialise(file + "/store")
        #expect(below.status == 3)
        #expect(below.stderr.contains("cannot create --store \(file)/store: \(file) is not a directory"), "\(below.stderr)")
        #expect(!below.stderr.contains("NSCocoaErrorDomain"))
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "not a ledger")
        // Missing parents are created, private to the owner.
        let nested = dir.path("a/b/store").path
        let created = try initialise(nested)
        #expect(created.status == 0, "\(created.stderr)")
        let mode = try FileManager.default.attributesOfItem(atPath: dir.path("a").path)[.posixPermissions] as? Int
        #expect(mode == 0o700)
        #expect(try LedgerBinary.run(["verify", "--store", nested]).status == 0)
    }
}
