public import Foundation
public import LedgerCrypto

/// The ledger's Ed25519 signing key: it signs checkpoints and dispute bundles. It lives in
/// `ledger-signing.key` beside `ledger.key` (never inside the LMDB files), as PKCS#8 PEM, mode 0600.
/// `init` creates it; a store created before it existed gets one on first use.
public enum SigningKey {
    /// Name of the signing key file inside the store directory.
    public static let fileName = "ledger-signing.key"

    /// Creates a new signing key file at `url`; fails when the file exists.
    @discardableResult
    public static func create(at url: URL) throws -> Ed25519PrivateKey {
        let key = try Ed25519PrivateKey.generate()
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else {
            throw LedgerStoreError.corrupt("could not create \(url.path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let text = Array(key.pem.utf8)
        guard write(fd, text, text.count) == text.count, fsync(fd) == 0 else {
            throw LedgerStoreError.corrupt("could not write \(url.path): \(String(cString: strerror(errno)))")
        }
        return key
    }

    /// Loads the signing key at `url`. Refuses a file others can read, like the ledger key.
    public static func load(from url: URL) throws -> Ed25519PrivateKey {
        var info = stat()
        guard stat(url.path, &info) == 0 else { throw LedgerStoreError.missingKey(path: url.path) }
        let mode = UInt16(info.st_mode & 0o777)
        guard mode & 0o077 == 0 else { throw LedgerStoreError.keyReadableByOthers(path: url.path, mode: mode) }
        guard let data = FileManager.default.contents(atPath: url.path),
            let key = try? Ed25519PrivateKey(pem: String(decoding: data, as: UTF8.self))
        else { throw LedgerStoreError.corrupt("the signing key file \(url.path) is not an Ed25519 PEM private key") }
        return key
    }
}

extension LedgerStore {
    /// Where the signing key file is.
    public var signingKeyURL: URL { directory.appendingPathComponent(SigningKey.fileName) }

    /// The ledger signing key, created on first use when the store has none.
    public func signingKey() throws -> Ed25519PrivateKey {
        if !FileManager.default.fileExists(atPath: signingKeyURL.path) {
            do {
                return try SigningKey.create(at: signingKeyURL)
            } catch {
                // Another process may have created it first; load whatever is there.
                guard FileManager.default.fileExists(atPath: signingKeyURL.path) else { throw error }
            }
        }
        return try SigningKey.load(from: signingKeyURL)
    }
}
