import Foundation
import LedgerCore
import LedgerCrypto
import OwnershipLedger

/// A ledger in a temporary directory with a support roster: administrators `root` (set at init) and
/// `ann` (enrolled by root: the bootstrap), operator `olivia` and approver `adam` (proposed by root,
/// co-signed by ann), enrolled a day before ``Fixtures/start``.
public struct StaffedLedger {
    public let ledger: Ledger
    public let directory: TemporaryDirectory
    /// The verifier protocol with `--trust-decoded`.
    public let submit: SubmitProtocol
    public let root: Ed25519PrivateKey
    public let ann: Ed25519PrivateKey
    public let olivia: Ed25519PrivateKey
    public let adam: Ed25519PrivateKey

    public init(
        _ label: String, configuration: LedgerConfiguration = Fixtures.configuration, clock: @escaping @Sendable () -> Int64 = Fixtures.clock
    ) throws {
        root = try Ed25519PrivateKey.generate()
        ann = try Ed25519PrivateKey.generate()
        olivia = try Ed25519PrivateKey.generate()
        adam = try Ed25519PrivateKey.generate()
        directory = TemporaryDirectory(label)
        ledger = try Ledger.initialize(
            at: TestStore.current.location(in: directory), configuration: configuration,
            administrator: (id: "root", publicKey: root.publicKey),
            clock: clock)
        submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = try ledger.enrollStaff(
            "ann", roles: .administrator, publicKey: ann.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root,
            at: Fixtures.start - Fixtures.day)
        try enroll("olivia", roles: .operator_, key: olivia)
        try enroll("adam", roles: .approver, key: adam)
    }

    /// Enrols `staff`, proposed by `root` and co-signed by `ann`, a day before ``Fixtures/start``.
    public func enroll(_ staff: String, roles: StaffRoles, key: Ed25519PrivateKey, ownAccountUID: String? = nil) throws {
        let proposal = try ledger.enrollStaff(
            staff, roles: roles, publicKey: key.publicKey, ownAccountUID: ownAccountUID, administrator: "root", administratorKey: root,
            at: Fixtures.start - Fixtures.day)
        _ = try ledger.coSignRosterChange(
            digest: proposal.changeDigest ?? .zero, administrator: "ann", key: ann, at: Fixtures.start - Fixtures.day)
    }

    /// Sends one protocol line; returns the answer.
    @discardableResult
    public func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }
}

extension Ledger {
    /// Approves case `caseId` as the runbook does: the plan digest the dry run shows, reviewed, then signed.
    public func approveReviewed(caseId: String, approver: String, key: Ed25519PrivateKey, at: Int64? = nil) throws -> SupportOutcome {
        let reviewed = try reviewTransfer(caseId: caseId).planDigest ?? .zero
        return try approveTransfer(caseId: caseId, approver: approver, key: key, planDigest: reviewed, at: at)
    }
}
