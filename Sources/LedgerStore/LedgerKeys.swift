import Foundation
public import LedgerCore
import LedgerCrypto

/// The ledger key and everything derived from it. The key lives in `ledger.key` beside the LMDB
/// files (never inside them), mode 0600.
public struct LedgerKeys: Sendable {
    /// Name of the key file inside the store directory.
    public static let fileName = "ledger.key"

    private let lineageKey: [UInt8]
    private let transactionKey: [UInt8]
    private let notificationKey: [UInt8]
    private let eventKey: [UInt8]
    let vaultKey: [UInt8]
    let sealKey: [UInt8]
    /// Stored in the metadata at creation: opening with another key file is refused.
    let checkValue: [UInt8]

    init(secret: [UInt8]) throws {
        func derive(_ label: String) throws -> [UInt8] { try Digest.hmacSHA256(key: secret, message: Array(label.utf8)) }
        lineageKey = try derive("lineage")
        transactionKey = try derive("transaction")
        notificationKey = try derive("notification")
        eventKey = try derive("event-id")
        vaultKey = try derive("identity-vault")
        sealKey = try derive("identity-seal")
        checkValue = try derive("key-check")
    }

    /// HMAC-SHA256 over `apple|<environment>|<originalTransactionId>`.
    public func lineage(environment: String, originalTransactionId: String) throws -> LineageKey {
        LineageKey(try digest(lineageKey, "apple|\(environment)|\(originalTransactionId)"))
    }

    /// Keyed hash of an Apple `transactionId`.
    public func transaction(environment: String, transactionId: String) throws -> Digest32 {
        try digest(transactionKey, "apple|\(environment)|\(transactionId)")
    }

    /// Keyed hash of a `notificationUUID`.
    public func notification(uuid: String) throws -> Digest32 { try digest(notificationKey, "apple|\(uuid)") }

    /// The id of event `index` of the batch identified by `batch` (a description of the submission
    /// that caused it, which may contain identifiers: only its keyed hash is stored).
    public func eventId(batch: String, index: Int) throws -> Digest32 {
        try digest(eventKey, "\(batch)#\(index)")
    }

    private func digest(_ key: [UInt8], _ message: String) throws -> Digest32 {
        guard let digest = Digest32(try Digest.hmacSHA256(key: key, message: Array(message.utf8))) else {
            throw CryptoError("HMAC-SHA256", detail: "the digest is not 32 bytes")
        }
        return digest
    }

    // MARK: Key file

    static func create(at url: URL) throws -> LedgerKeys {
        let secret = try Digest.randomBytes(32)
        try FileAccess.createKeyFile(url, contents: Array((secret.hex + "\n").utf8))
        return try LedgerKeys(secret: secret)
    }

    static func load(from url: URL) throws -> LedgerKeys {
        let text = String(decoding: try FileAccess.readKeyFile(url), as: UTF8.self)
        guard let secret = [UInt8](hex: text.trimmingCharacters(in: .whitespacesAndNewlines)), secret.count == 32 else {
            throw LedgerStoreError.malformedKey(path: url.path)
        }
        return try LedgerKeys(secret: secret)
    }
}
