import COpenSSL
import Foundation

/// AES-256-GCM authenticated encryption, used to keep account UIDs out of the store in clear.
///
/// Sealed layout: 12-byte nonce ‖ ciphertext ‖ 16-byte tag. The tag also authenticates the
/// `associatedData` (not stored: the opener supplies it again, and a value sealed with other
/// associated data, or with none, does not open). ``SealingKey`` seals and opens under one key
/// many times; these are its one-off forms.
public enum SealedBox {
    /// Encrypts `plaintext` under a 32-byte `key` with a fresh random nonce.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        try SealingKey(key).seal(plaintext, associatedData: associatedData, random: RandomPool(blockSize: 12))
    }

    /// ``seal(_:key:associatedData:)`` with the nonce drawn from `random` (a writer sealing many UIDs
    /// draws their nonces in a few `RAND_bytes` calls).
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = [], random: RandomPool) throws -> [UInt8] {
        try SealingKey(key).seal(plaintext, associatedData: associatedData, random: random)
    }

    /// Decrypts what ``seal(_:key:associatedData:)`` produced; throws when the key or the associated
    /// data is not the sealer's or a byte changed.
    public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        try SealingKey(key).open(sealed, associatedData: associatedData)
    }

    /// ``open(_:key:)`` of a value read back from storage, which may have been changed: nil when it is
    /// not what `seal` made under `key` (too short to be sealed, a byte changed, sealed under another
    /// key or with other associated data). Throws only when libcrypto itself fails (an unusable
    /// installation or configuration), which says nothing about the value, so a caller never reports
    /// that as a damaged value.
    public static func openIfAuthentic(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8]? {
        try SealingKey(key).openIfAuthentic(sealed, associatedData: associatedData)
    }
}

/// A 32-byte AES-256-GCM key that seals and opens values in ``SealedBox``'s layout, keeping its
/// cipher contexts for reuse: a context is set up with the key once (expanding it and deriving the
/// GHASH key cost more than sealing a UID) and then only given each value's nonce. Safe to use from
/// any number of threads: each operation takes a context of its own, and at most
/// ``SealingKey/idleLimit`` of each direction wait for reuse.
public final class SealingKey: @unchecked Sendable {  // the idle contexts are only touched under `lock`
    private let key: [UInt8]
    private let lock = NSLock()
    private var idleEncrypting: [OpaquePointer] = []
    private var idleDecrypting: [OpaquePointer] = []
    /// Contexts of each direction kept for reuse; more are freed after their operation.
    static let idleLimit = 8

    public init(_ key: [UInt8]) throws {
        guard key.count == 32 else { throw CryptoError("AES-GCM key", detail: "the key is \(key.count) bytes, not 32") }
        self.key = key
    }

    deinit {
        for context in idleEncrypting + idleDecrypting { EVP_CIPHER_CTX_free(context) }
    }

    /// Encrypts `plaintext` with a fresh nonce drawn from `random`: nonce ‖ ciphertext ‖ tag.
    public func seal(_ plaintext: [UInt8], associatedData: [UInt8] = [], random: RandomPool) throws -> [UInt8] {
        let plaintextLength = try int32Length(plaintext.count, "EVP_EncryptUpdate")
        // nonce ‖ ciphertext ‖ tag, written in place (GCM's ciphertext is as long as the plaintext).
        var sealed = [UInt8](repeating: 0, count: 12 + plaintext.count + 16)
        try sealed.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw CryptoError("AES-GCM seal", detail: "no output buffer") }
            try random.fill(base, count: 12)
            _ = try withContext(encrypting: true, nonce: base) { context in
                var length: Int32 = 0
                if !associatedData.isEmpty {
                    let aadLength = try int32Length(associatedData.count, "EVP_EncryptUpdate")
                    try check(EVP_EncryptUpdate(context, nil, &length, associatedData, aadLength), "EVP_EncryptUpdate(associated data)")
                }
                try check(EVP_EncryptUpdate(context, base + 12, &length, plaintext, plaintextLength), "EVP_EncryptUpdate")
                var finalLength: Int32 = 0
                try check(EVP_EncryptFinal_ex(context, base + 12 + Int(length), &finalLength), "EVP_EncryptFinal_ex")
                guard Int(length + finalLength) == plaintext.count else {
                    throw CryptoError("AES-GCM seal", detail: "\(length + finalLength) bytes of ciphertext for \(plaintext.count) of plaintext")
                }
                try check(EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, base + 12 + plaintext.count), "EVP_CTRL_GCM_GET_TAG")
                return true
            }
        }
        return sealed
    }

    /// Decrypts what ``seal(_:associatedData:random:)`` produced; throws when the key or the
    /// associated data is not the sealer's or a byte changed.
    public func open(_ sealed: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        switch try unseal(sealed, associatedData: associatedData) {
        case .plaintext(let plaintext): return plaintext
        case .notAuthentic(let error): throw error
        }
    }

    /// ``open(_:associatedData:)`` of a value read back from storage, which may have been changed:
    /// nil when it is not authentic (``SealedBox/openIfAuthentic(_:key:associatedData:)``). Throws
    /// only when libcrypto itself fails.
    public func openIfAuthentic(_ sealed: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8]? {
        if case .plaintext(let plaintext) = try unseal(sealed, associatedData: associatedData) { return plaintext }
        return nil
    }

    private enum Unsealed {
        case plaintext([UInt8])
        /// The value is not authentic: why.
        case notAuthentic(CryptoError)
    }

    private func unseal(_ sealed: [UInt8], associatedData: [UInt8]) throws -> Unsealed {
        guard sealed.count >= 28 else {
            return .notAuthentic(CryptoError("AES-GCM open", detail: "the sealed value is \(sealed.count) bytes, shorter than nonce and tag"))
        }
        let ciphertextLength = try int32Length(sealed.count - 28, "EVP_DecryptUpdate")
        var plaintext = [UInt8](repeating: 0, count: sealed.count - 28 + 16)
        var produced = 0
        let authentic = try sealed.withUnsafeBufferPointer { input in
            guard let base = input.baseAddress else { throw CryptoError("AES-GCM open", detail: "no input buffer") }
            return try plaintext.withUnsafeMutableBufferPointer { output in
                guard let out = output.baseAddress else { throw CryptoError("AES-GCM open", detail: "no output buffer") }
                return try withContext(encrypting: false, nonce: base) { context in
                    var length: Int32 = 0
                    if !associatedData.isEmpty {
                        let aadLength = try int32Length(associatedData.count, "EVP_DecryptUpdate")
                        try check(EVP_DecryptUpdate(context, nil, &length, associatedData, aadLength), "EVP_DecryptUpdate(associated data)")
                    }
                    try check(EVP_DecryptUpdate(context, out, &length, base + 12, ciphertextLength), "EVP_DecryptUpdate")
                    // libcrypto copies the tag (it only reads it, through a pointer it does not mark const).
                    let tag = UnsafeMutablePointer(mutating: base + sealed.count - 16)
                    try check(EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, tag), "EVP_CTRL_GCM_SET_TAG")
                    var finalLength: Int32 = 0
                    let authentic = EVP_DecryptFinal_ex(context, out + Int(length), &finalLength) == 1
                    produced = Int(length + finalLength)
                    return authentic
                }
            }
        }
        guard authentic else { return .notAuthentic(CryptoError("AES-GCM authentication")) }
        plaintext.removeLast(plaintext.count - produced)
        return .plaintext(plaintext)
    }

    /// Runs `body` with a context of this key for `encrypting` (or decrypting), set to `nonce` (12
    /// bytes). The context is kept for reuse when `body` returns true (an operation that completed);
    /// otherwise, or when `body` throws, it is freed.
    private func withContext(encrypting: Bool, nonce: UnsafePointer<UInt8>, _ body: (OpaquePointer) throws -> Bool) throws -> Bool {
        let reused = lock.withLock { encrypting ? idleEncrypting.popLast() : idleDecrypting.popLast() }
        let context: OpaquePointer
        if let reused {
            context = reused
        } else {
            guard let fresh = EVP_CIPHER_CTX_new() else { throw CryptoError("EVP_CIPHER_CTX_new") }
            context = fresh
        }
        var keep = false
        defer { if !(keep && keepIdle(context, encrypting: encrypting)) { EVP_CIPHER_CTX_free(context) } }
        let direction: Int32 = encrypting ? 1 : 0
        if reused == nil {
            try check(EVP_CipherInit_ex(context, try fetchedAES256GCM.get(), nil, key, nonce, direction), "EVP_CipherInit_ex")
        } else {
            try check(EVP_CipherInit_ex(context, nil, nil, nil, nonce, direction), "EVP_CipherInit_ex (nonce)")
        }
        let completed = try body(context)
        keep = completed
        return completed
    }

    /// Keeps `context` for the next operation of its direction; false when enough wait already.
    private func keepIdle(_ context: OpaquePointer, encrypting: Bool) -> Bool {
        lock.withLock {
            if encrypting {
                guard idleEncrypting.count < Self.idleLimit else { return false }
                idleEncrypting.append(context)
            } else {
                guard idleDecrypting.count < Self.idleLimit else { return false }
                idleDecrypting.append(context)
            }
            return true
        }
    }
}

/// AES-256-GCM as fetched from libcrypto's providers once per process: the implicit fetch of
/// `EVP_aes_256_gcm()` in every `EVP_EncryptInit_ex` costs more than sealing a UID. An `EVP_CIPHER`
/// is immutable and may be shared by threads. A failed fetch is kept with its reason and thrown by every use.
nonisolated(unsafe) private let fetchedAES256GCM: Result<OpaquePointer, CryptoError> = {
    guard let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else { return .failure(CryptoError("EVP_CIPHER_fetch(AES-256-GCM)")) }
    return .success(cipher)
}()
