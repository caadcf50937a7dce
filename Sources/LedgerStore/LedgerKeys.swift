import Foundation
public import LedgerCore
import LedgerCrypto

/// The ledger key and everything derived from it (a class: the derived keys and cipher contexts are
/// about a kilobyte, read for every submitted line and never copied). The key lives in `ledger.key` beside the LMDB
/// files (never inside them), mode 0600.
public final class LedgerKeys: Sendable {
    /// Name of the key file inside the store directory.
    public static let fileName = "ledger.key"

    private let lineageKey: HMACSHA256Key
    private let transactionKey: HMACSHA256Key
    private let commandKey: HMACSHA256Key
    private let vaultSecret: HMACSHA256Key
    let sealKey: [UInt8]
    /// ``sealKey`` with its cipher contexts kept for reuse (every seal and open of a UID goes through it).
    let sealing: SealingKey
    /// Stored in the metadata at creation: opening with another key file is refused.
    let checkValue: [UInt8]

    init(secret: [UInt8]) throws {
        func derive(_ label: String) throws -> [UInt8] { try Digest.hmacSHA256(key: secret, message: Array(label.utf8)) }
        lineageKey = try HMACSHA256Key(derive("lineage"))
        transactionKey = try HMACSHA256Key(derive("transaction"))
        commandKey = try HMACSHA256Key(derive("event-id"))
        vaultSecret = try HMACSHA256Key(derive("identity-vault"))
        sealKey = try derive("identity-seal")
        sealing = try SealingKey(sealKey)
        checkValue = try derive("key-check")
    }

    /// The lineage key of `apple|<environment>|<originalTransactionId>`.
    public func lineage(environment: String, originalTransactionId: String) throws -> LineageKey {
        LineageKey(try key128(lineageKey, concatenating: "apple|", environment, "|", originalTransactionId))
    }

    /// Keyed hash of an Apple `transactionId`.
    public func transaction(environment: String, transactionId: String) throws -> Key128 {
        try key128(transactionKey, concatenating: "apple|", environment, "|", transactionId)
    }

    /// The idempotency key of the command `descriptor` describes (a description of the submission,
    /// which may contain identifiers: only its keyed hash is stored). The first 16 bytes of format 1's
    /// id of the command's first event, so commands decided before an upgrade are recognised after it.
    public func command(_ descriptor: String) throws -> Key128 { try key128(commandKey, concatenating: descriptor, "#0") }

    /// The idempotency key of the submission described by `parts`: ``command(_:)`` of the parts each
    /// prefixed with its UTF-8 length in decimal and a colon (`"11:transaction8:purchase…"`), so no UID
    /// or id can make two submissions share a key. The description is written straight into the hash's
    /// input, never built as a `String`.
    public func command(describedBy parts: String...) throws -> Key128 {
        try key128(commandKey, parts, lengthPrefixed: true, suffix: "#0")
    }

    /// The identity vault's lookup key of a UID.
    public func vaultKey(uid: String) throws -> Key128 { try key128(vaultSecret, concatenating: uid) }

    /// The vault key of the UID whose UTF-8 bytes are `uid` (as a sealed UID unseals: `verify`
    /// hashes what it unsealed, whatever the bytes are).
    func vaultKey(uidBytes uid: [UInt8]) throws -> Key128 { try uid.withUnsafeBytes { try key128(vaultSecret, $0) } }

    /// ``key128(_:_:)`` of the UTF-8 of `parts`, one after the other.
    private func key128(_ key: HMACSHA256Key, concatenating parts: String...) throws -> Key128 { try key128(key, parts) }

    /// ``key128(_:_:)`` of the UTF-8 of `parts` one after the other, each after its UTF-8 length in
    /// decimal and a colon when `lengthPrefixed`, then `suffix`: written into one buffer on the stack,
    /// copied from each string's own UTF-8 (these keys are computed for every submitted line).
    private func key128(_ key: HMACSHA256Key, _ parts: [String], lengthPrefixed: Bool = false, suffix: StaticString = "") throws -> Key128 {
        let prefixBytes = lengthPrefixed ? 21 : 0  // the most an Int's decimal digits and a colon take
        let capacity = parts.reduce(suffix.utf8CodeUnitCount) { $0 + $1.utf8.count + prefixBytes }
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            var end = 0
            func put(_ bytes: UnsafeBufferPointer<UInt8>) {
                guard let base = bytes.baseAddress, let target = buffer.baseAddress else { return }
                (target + end).update(from: base, count: bytes.count)
                end += bytes.count
            }
            for var part in parts {
                if lengthPrefixed {
                    var length = String(part.utf8.count)
                    length.withUTF8 { put($0) }
                    buffer[end] = UInt8(ascii: ":")
                    end += 1
                }
                part.withUTF8 { put($0) }
            }
            put(UnsafeBufferPointer(start: suffix.utf8Start, count: suffix.utf8CodeUnitCount))
            return try key128(key, UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[..<end])))
        }
    }

    /// The first 16 bytes of HMAC-SHA256(`key`, `message`): 128 bits under a secret key, so no one
    /// without the key can aim for a collision, and the birthday bound is 2^64 identifiers.
    private func key128(_ key: HMACSHA256Key, _ message: UnsafeRawBufferPointer) throws -> Key128 {
        try key.authenticate(message).withBytes { Key128(loading: $0, at: 0) }
    }

    // MARK: Key file

    static func create(at url: URL) throws -> LedgerKeys {
        let secret = try Digest.randomBytes(32)
        try FileAccess.createKeyFile(url, contents: Array((secret.hex + "\n").utf8))
        return try LedgerKeys(secret: secret)
    }

    static func load(from url: URL) throws -> LedgerKeys { try parse(FileAccess.readKeyFile(url), path: url.path) }

    /// The keys of a key file's content: 64 hexadecimal digits, surrounding whitespace allowed.
    static func parse(_ contents: [UInt8], path: String) throws -> LedgerKeys {
        let text = String(decoding: contents, as: UTF8.self)
        guard let secret = [UInt8](hex: text.trimmingCharacters(in: .whitespacesAndNewlines)), secret.count == 32 else {
            throw LedgerStoreError.malformedKey(path: path)
        }
        return try LedgerKeys(secret: secret)
    }
}
