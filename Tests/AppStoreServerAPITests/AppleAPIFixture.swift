import AppStoreServerAPI
import AppleSignedData
import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger

/// A Sandbox ledger trusting the test PKI root, a fake App Store server expecting the test App Store
/// Connect key (`testSigningKey.p8`), and helpers to sign Apple-shaped data with the test PKI leaf.
final class AppleAPIFixture: @unchecked Sendable {
    static let certs = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors/certs")
    static func file(_ name: String) throws -> Data { try Data(contentsOf: certs.appendingPathComponent(name)) }

    let directory = TemporaryDirectory("ledger-apple-api")
    let key: ES256PrivateKey
    let server: FakeAppStoreServer
    let ledger: Ledger
    /// Now, rounded down to the second; test data is placed around it.
    let now = LedgerTime.now() / 1000 * 1000
    let day: Int64 = 86_400_000
    let sleeps = Collected<Double>()  // waits recorded instead of slept
    var store: URL { directory.path("store") }

    init() throws {
        key = try ES256PrivateKey(pem: String(decoding: try Self.file("testSigningKey.p8"), as: UTF8.self))
        server = try FakeAppStoreServer(expected: .init(publicKey: key.publicKey))
        ledger = try Ledger.initialize(
            at: directory.path("store"),
            configuration: LedgerConfiguration(
                bundleId: Fixtures.bundleId, environment: .sandbox, rootCertificates: [try Self.file("testCA.der")]))
    }

    func cleanUp() {
        server.shutdown()
        directory.remove()
    }

    /// A client of the fake server; retries are recorded in ``sleeps`` instead of slept.
    func client(key: ES256PrivateKey? = nil, keyId: String? = nil, maximumAttempts: Int = 4) throws -> AppStoreServerAPIClient {
        let credentials = try AppStoreConnectCredentials(
            issuerId: server.expected.issuerId, keyId: keyId ?? server.expected.keyId, privateKey: key ?? self.key)
        let sleeps = self.sleeps
        return try AppStoreServerAPIClient(
            baseURL: server.baseURL, credentials: credentials, bundleId: Fixtures.bundleId,
            retry: .init(
                maximumAttempts: maximumAttempts, initialDelay: 0.5,
                sleep: { seconds in
                    sleeps.add(seconds)
                    return true
                }), clock: LedgerTime.now)
    }

    /// `payload` signed like App Store data: ES256 with the test leaf key and the test chain in `x5c`.
    func sign(_ payload: [String: Any]) throws -> String {
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map { [UInt8](try Self.file($0)) }
        return try TestJWSSigner.sign(
            payload: payload, chain: chain, privateKeyPEM: String(decoding: try Self.file("testLeaf.key.pem"), as: UTF8.self))
    }

    /// A signed subscription transaction of lineage `otid`, bought at `at` for 30 days.
    func transaction(_ otid: String, id: String? = nil, at: Int64, revokedAt: Int64? = nil) throws -> String {
        try sign(Fixtures.transaction(otid, transactionId: id, at: at, revokedAt: revokedAt))
    }

    /// A signed notification `signedPayload` about a transaction of lineage `otid`.
    func notification(_ type: String, uuid: String, otid: String, transactionId: String, at: Int64, revokedAt: Int64? = nil) throws
        -> String
    {
        try sign([
            "notificationType": type, "notificationUUID": uuid, "signedDate": at, "version": "2.0",
            "data": [
                "environment": "Sandbox", "bundleId": Fixtures.bundleId, "status": revokedAt == nil ? 1 : 5,
                "signedTransactionInfo": try transaction(otid, id: transactionId, at: at, revokedAt: revokedAt),
            ],
        ])
    }

    /// Adds a notification to Apple's history at its signed date.
    func apple(_ type: String, uuid: String, otid: String, transactionId: String, at: Int64, revokedAt: Int64? = nil) throws {
        server.add(
            notification: try notification(type, uuid: uuid, otid: otid, transactionId: transactionId, at: at, revokedAt: revokedAt),
            signedDate: at)
    }

    /// `uid` buys lineage `otid` at `at`, submitted signed as `ledger submit` would.
    @discardableResult
    func purchase(_ uid: String, otid: String, at: Int64) throws -> Decision {
        let payload = try ledger.verifier.verifyTransaction(try transaction(otid, at: at), now: at).get()
        return try ledger.submit(.transaction(.purchase, uid: uid, payload, .verifiedJWS), at: at)
    }

    /// Records in the log.
    var recordCount: UInt64 { (try? ledger.store.head().sequence) ?? 0 }

    /// A copy of the test key in the fixture's directory with `mode`; returns its path.
    func keyFile(mode: Int = 0o600, name: String = "AuthKey_TESTKEY123.p8", contents: Data? = nil) throws -> String {
        let path = directory.path(name).path
        try (contents ?? Self.file("testSigningKey.p8")).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }
}
