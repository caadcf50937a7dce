import COpenSSL

/// AES-256-GCM authenticated encryption, used to keep account UIDs out of the store in clear.
///
/// Sealed layout: 12-byte nonce ‖ ciphertext ‖ 16-byte tag. The tag also authenticates the
/// `associatedData` (not stored: the opener supplies it again, and a value sealed with other
/// associated data, or with none, does not open).
public enum SealedBox {
    /// Encrypts `plaintext` under a 32-byte `key` with a fresh random nonce.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        let random = RandomPool(blockSize: 12)
        return try seal(plaintext, key: key, associatedData: associatedData, random: random)
    }

    /// ``seal(_:key:associatedData:)`` with the nonce drawn from `random` (a writer sealing many UIDs
    /// draws their nonces in a few `RAND_bytes` calls).
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = [], random: RandomPool) throws -> [UInt8] {
        guard key.count == 32 else { throw CryptoError("AES-GCM seal", detail: "the key is \(key.count) bytes, not 32") }
        let plaintextLength = try int32Length(plaintext.count, "EVP_EncryptUpdate")
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        // nonce ‖ ciphertext ‖ tag, written in place (GCM's ciphertext is as long as the plaintext).
        var sealed = [UInt8](repeating: 0, count: 12 + plaintext.count + 16)
        try sealed.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw CryptoError("AES-GCM seal", detail: "no output buffer") }
            try random.fill(base, count: 12)
            try check(EVP_EncryptInit_ex(context, try fetchedAES256GCM.get(), nil, key, base), "EVP_EncryptInit_ex")
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
        }
        return sealed
    }

    /// Decrypts what ``seal(_:key:associatedData:)`` produced; throws when the key or the associated
    /// data is not the sealer's or a byte changed.
    public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
        switch try unseal(sealed, key: key, associatedData: associatedData) {
        case .plaintext(let plaintext): return plaintext
        case .notAuthentic(let error): throw error
        }
    }

    /// ``open(_:key:)`` of a value read back from storage, which may have been changed: nil when it is
    /// not what `seal` made under `key` (too short to be sealed, a byte changed, sealed under another
    /// key or with other associated data). Throws only when libcrypto itself fails (an unusable
    /// installation or configuration), which says nothing about the value, so a caller never reports
    /// that as a damaged value.
    public static func openIfAuthentic(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8]? {
        if case .plaintext(let plaintext) = try unseal(sealed, key: key, associatedData: associatedData) { return plaintext }
        return nil
    }

    private enum Unsealed {
        case plaintext([UInt8])
        /// The value is not authentic: why.
        case notAuthentic(CryptoError)
    }

    private static func unseal(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8]) throws -> Unsealed {
        guard key.count == 32 else { throw CryptoError("AES-GCM open", detail: "the key is \(key.count) bytes, not 32") }
        guard sealed.count >= 28 else {
            return .notAuthentic(CryptoError("AES-GCM open", detail: "the sealed value is \(sealed.count) bytes, shorter than nonce and tag"))
        }
        let ciphertextLength = try int32Length(sealed.count - 28, "EVP_DecryptUpdate")
        let nonce = Array(sealed[0..<12])
        let ciphertext = Array(sealed[12..<(sealed.count - 16)])
        var tag = Array(sealed[(sealed.count - 16)...])
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        try check(EVP_DecryptInit_ex(context, try fetchedAES256GCM.get(), nil, key, nonce), "EVP_DecryptInit_ex")
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var length: Int32 = 0
        if !associatedData.isEmpty {
            let aadLength = try int32Length(associatedData.count, "EVP_DecryptUpdate")
            try check(EVP_DecryptUpdate(context, nil, &length, associatedData, aadLength), "EVP_DecryptUpdate(associated data)")
        }
        try check(EVP_DecryptUpdate(context, &plaintext, &length, ciphertext, ciphertextLength), "EVP_DecryptUpdate")
        try check(EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag), "EVP_CTRL_GCM_SET_TAG")
        var finalLength: Int32 = 0
        let authentic = try plaintext.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw CryptoError("AES-GCM open", detail: "no output buffer") }
            return EVP_DecryptFinal_ex(context, base + Int(length), &finalLength) == 1
        }
        guard authentic else { return .notAuthentic(CryptoError("AES-GCM authentication")) }
        return .plaintext(Array(plaintext.prefix(Int(length + finalLength))))
    }
}

/// AES-256-GCM as fetched from libcrypto's providers once per process: the implicit fetch of
/// `EVP_aes_256_gcm()` in every `EVP_EncryptInit_ex` costs more than sealing a UID. An `EVP_CIPHER`
/// is immutable and may be shared by threads. A failed fetch is kept with its reason and thrown by every use.
nonisolated(unsafe) private let fetchedAES256GCM: Result<OpaquePointer, CryptoError> = {
    guard let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else { return .failure(CryptoError("EVP_CIPHER_fetch(AES-256-GCM)")) }
    return .success(cipher)
}()
