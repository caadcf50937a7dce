import Foundation
import LedgerCrypto
import OwnershipLedger

/// A ledger in a temporary directory with a support roster: administrator `root` (set at init),
/// operator `olivia` and approver `adam`, enrolled a day before ``Fixtures/start``.
public struct StaffedLedger {
    public let ledger: Ledger
    public let directory: TemporaryDirectory
    /// The verifier protocol with `--trust-decoded`.
    public let submit: SubmitProtocol
    public let root: Ed25519PrivateKey
    public let olivia: Ed25519PrivateKey
    public let adam: Ed25519PrivateKey

    public init(_ label: String, clock: @escaping @Sendable () -> Int64 = Fixtures.clock) throws {
        root = try Ed25519PrivateKey.generate()
        olivia = try Ed25519PrivateKey.generate()
        adam = try Ed25519PrivateKey.generate()
        directory = TemporaryDirectory(label)
        ledger = try Ledger.initialize(
            at: TestStore.current.location(in: directory), configuration: Fixtures.configuration,
            administrator: (id: "root", publicKey: root.publicKey),
            clock: clock)
        submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        try enroll("olivia", roles: .operator_, key: olivia)
        try enroll("adam", roles: .approver, key: adam)
    }

    /// Enrols `staff`, signed by `root`, a day before ``Fixtures/start``.
    public func enroll(_ staff: String, roles: StaffRoles, key: Ed25519PrivateKey, ownAccountUID: String? = nil) throws {
        _ = try ledger.enrollStaff(
            staff, roles: roles, publicKey: key.publicKey, ownAccountUID: ownAccountUID, administrator: "root", administratorKey: root,
            at: Fixtures.start - Fixtures.day)
    }

    /// Sends one protocol line; returns the answer.
    @discardableResult
    public func send(_ object: [String: Any]) -> [String: Any] { Fixtures.object(submit.respond(to: Fixtures.line(object))) }
}
