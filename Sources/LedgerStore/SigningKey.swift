public import Foundation
import LedgerCore
public import LedgerCrypto

/// The ledger's Ed25519 signing key: it signs checkpoints and dispute bundles. It lives in
/// `ledger-signing.key` beside `ledger.key` (never inside the LMDB files), as PKCS#8 PEM, mode 0600.
/// `init` creates it and records its fingerprint in the metadata (`signing-key`); from then on a
/// missing or different file is refused rather than replaced. Only a store created before signing
/// keys existed (no fingerprint recorded) gets one on first use, and then records it.
public enum SigningKey {
    /// Name of the signing key file inside the store directory.
    public static let fileName = "ledger-signing.key"

    /// What the store records of its signing key: SHA-256 of the raw 32-byte public key (its first
    /// 8 hex digits are the checkpoint origin's).
    public static func fingerprint(_ publicKey: Ed25519PublicKey) throws -> [UInt8] { try Digest.sha256(publicKey.rawRepresentation) }

    /// Creates a new signing key file at `url`; fails when the file exists.
    @discardableResult
    public static func create(at url: URL) throws -> Ed25519PrivateKey {
        let key = try Ed25519PrivateKey.generate()
        try FileAccess.createKeyFile(url, contents: Array(key.pem.utf8))
        return key
    }

    /// Loads the signing key at `url`. Refuses a file others can read, like the ledger key.
    public static func load(from url: URL) throws -> Ed25519PrivateKey {
        let pem = String(decoding: try FileAccess.readKeyFile(url), as: UTF8.self)
        do {
            return try Ed25519PrivateKey(pem: pem)
        } catch let error as Ed25519Error {
            throw LedgerStoreError.corrupt("the signing key file \(url.path) is not an Ed25519 PEM private key (\(error))")
        }
    }
}

extension LedgerStore {
    /// Where the signing key file is.
    public var signingKeyURL: URL { keyDirectory.appendingPathComponent(SigningKey.fileName) }

    /// The ledger signing key. Refuses a missing file or a file with another key when the store
    /// recorded one (``LedgerStoreError/missingSigningKey(path:)``,
    /// ``LedgerStoreError/wrongSigningKey(path:recorded:found:)``): a silently replaced key would sign
    /// checkpoints nobody can check against the published public key. A store that recorded none
    /// (created before signing keys existed) adopts the file, or creates one, and records it.
    public func signingKey() throws -> Ed25519PrivateKey {
        let recorded = try read { try $0.meta(.signingKey) }
        if let recorded {
            guard try FileAccess.exists(signingKeyURL.path) else {
                throw LedgerStoreError.missingSigningKey(path: signingKeyURL.path)
            }
            let key = try SigningKey.load(from: signingKeyURL)
            try checkSigningKey(key, recorded: recorded)
            return key
        }
        let key: Ed25519PrivateKey
        if try FileAccess.exists(signingKeyURL.path) {
            key = try SigningKey.load(from: signingKeyURL)
        } else {
            do {
                key = try SigningKey.create(at: signingKeyURL)
            } catch {
                // Another process may have created it first; load whatever is there.
                guard try FileAccess.exists(signingKeyURL.path) else { throw error }
                key = try SigningKey.load(from: signingKeyURL)
            }
        }
        try write { reader, writer in
            // Another process may have recorded its key meanwhile: it must be this one.
            if let recorded = try reader.meta(.signingKey) {
                try checkSigningKey(key, recorded: recorded)
            } else {
                var batch = EngineBatch()
                batch.meta = [(.signingKey, try SigningKey.fingerprint(key.publicKey))]
                try writer.apply(batch)
            }
        }
        return key
    }

    /// What signs for this store: `external` (a key kept elsewhere, such as a hardware token), which
    /// must be the signing key the store recorded, or else the signing key file (``signingKey()``).
    public func signer(_ external: (any LedgerSigner)? = nil) throws -> any LedgerSigner {
        guard let external else { return try signingKey() }
        if let recorded = try read({ try $0.meta(.signingKey) }) { try checkSigningKey(external, recorded: recorded) }
        return external
    }

    private func checkSigningKey(_ key: some LedgerSigner, recorded: [UInt8]) throws {
        let found = try SigningKey.fingerprint(key.publicKey)
        guard found == recorded else {
            throw LedgerStoreError.wrongSigningKey(path: signingKeyURL.path, recorded: recorded.hex, found: found.hex)
        }
    }
}
