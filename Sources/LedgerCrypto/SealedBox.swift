import COpenSSL

/// AES-256-GCM authenticated encryption, used to keep account UIDs out of the store in clear.
///
/// Sealed layout: 12-byte nonce ‖ ciphertext ‖ 16-byte tag.
public enum SealedBox {
    /// Encrypts `plaintext` under a 32-byte `key` with a fresh random nonce.
    public static func seal(_ plaintext: [UInt8], key: [UInt8]) throws -> [UInt8] {
        guard key.count == 32 else { throw CryptoError("AES-GCM seal", detail: "the key is \(key.count) bytes, not 32") }
        let plaintextLength = try int32Length(plaintext.count, "EVP_EncryptUpdate")
        let nonce = try Digest.randomBytes(12)
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        try check(EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce), "EVP_EncryptInit_ex")
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        try check(EVP_EncryptUpdate(context, &ciphertext, &length, plaintext, plaintextLength), "EVP_EncryptUpdate")
        var finalLength: Int32 = 0
        try ciphertext.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw CryptoError("AES-GCM seal", detail: "no output buffer") }
            try check(EVP_EncryptFinal_ex(context, base + Int(length), &finalLength), "EVP_EncryptFinal_ex")
        }
        var tag = [UInt8](repeating: 0, count: 16)
        try check(EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, &tag), "EVP_CTRL_GCM_GET_TAG")
        return nonce + ciphertext.prefix(Int(length + finalLength)) + tag
    }

    /// Decrypts what ``seal(_:key:)`` produced; throws when the key is wrong or a byte changed.
    public static func open(_ sealed: [UInt8], key: [UInt8]) throws -> [UInt8] {
        guard key.count == 32 else { throw CryptoError("AES-GCM open", detail: "the key is \(key.count) bytes, not 32") }
        guard sealed.count >= 28 else {
            throw CryptoError("AES-GCM open", detail: "the sealed value is \(sealed.count) bytes, shorter than nonce and tag")
        }
        let ciphertextLength = try int32Length(sealed.count - 28, "EVP_DecryptUpdate")
        let nonce = Array(sealed[0..<12])
        let ciphertext = Array(sealed[12..<(sealed.count - 16)])
        var tag = Array(sealed[(sealed.count - 16)...])
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(context) }
        try check(EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce), "EVP_DecryptInit_ex")
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var length: Int32 = 0
        try check(EVP_DecryptUpdate(context, &plaintext, &length, ciphertext, ciphertextLength), "EVP_DecryptUpdate")
        try check(EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag), "EVP_CTRL_GCM_SET_TAG")
        var finalLength: Int32 = 0
        try plaintext.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw CryptoError("AES-GCM open", detail: "no output buffer") }
            try check(EVP_DecryptFinal_ex(context, base + Int(length), &finalLength), "AES-GCM authentication")
        }
        return Array(plaintext.prefix(Int(length + finalLength)))
    }
}
