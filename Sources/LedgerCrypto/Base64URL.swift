/// Base64url without padding, as JWS and JWT segments use it (RFC 4648 §5, RFC 7515 §2).
public enum Base64URL {
    /// Strict, canonical base64url without padding: any other character, padding, or non-zero
    /// trailing bits are refused, so a JWS segment has exactly one textual form.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? { decode(utf8: text.utf8) }

    /// ``decode(_:)`` of text given as its UTF-8 bytes.
    public static func decode(utf8 text: some Collection<UInt8>) -> [UInt8]? {
        Base64Coding.decode(text, alphabet: Base64Coding.urlSafe, padded: false)
    }

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Coding.encode(bytes, alphabet: Base64Coding.urlSafe, padded: false)
    }
}

/// Standard base64 with padding (RFC 4648 §4), as `x5c` certificate entries use it (RFC 7515 §4.1.6).
public enum Base64 {
    /// Strict, canonical base64: the length is a multiple of 4, with exactly the padding the bytes
    /// need and zero trailing bits; no whitespace, no extra `=`. Any other spelling is refused.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Base64Coding.decode(text.utf8, alphabet: Base64Coding.standard, padded: true)
    }

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Coding.encode(bytes, alphabet: Base64Coding.standard, padded: true)
    }
}

/// Table-driven base64 over bytes, without Foundation.
enum Base64Coding {
    /// The 64 characters, and the value of each byte (0xFF when it is not one of them).
    struct Alphabet {
        let characters: [UInt8]
        let values: [UInt8]

        init(_ characters: String) {
            self.characters = Array(characters.utf8)
            var values = [UInt8](repeating: 0xFF, count: 256)
            for (value, character) in self.characters.enumerated() { values[Int(character)] = UInt8(value) }
            self.values = values
        }
    }

    static let standard = Alphabet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    static let urlSafe = Alphabet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    static func decode(_ text: some Collection<UInt8>, alphabet: Alphabet, padded: Bool) -> [UInt8]? {
        let result = text.withContiguousStorageIfAvailable { decode($0, alphabet: alphabet, padded: padded) }
        if let result { return result }
        return Array(text).withUnsafeBufferPointer { decode($0, alphabet: alphabet, padded: padded) }
    }

    /// Four characters at a time into three bytes; the 2 or 3 characters of a short last group into
    /// 1 or 2 bytes, whose unused low bits must be zero.
    static func decode(_ text: UnsafeBufferPointer<UInt8>, alphabet: Alphabet, padded: Bool) -> [UInt8]? {
        var count = text.count
        if padded {
            guard count % 4 == 0 else { return nil }
            if count > 0 && text[count - 1] == UInt8(ascii: "=") { count -= 1 }
            if count > 0 && text[count - 1] == UInt8(ascii: "=") { count -= 1 }
        }
        let tail = count % 4
        guard tail != 1 else { return nil }
        let capacity = count / 4 * 3 + (tail == 0 ? 0 : tail - 1)
        return alphabet.values.withUnsafeBufferPointer { values -> [UInt8]? in
            var valid = true
            let output = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
                var input = 0
                var out = 0
                while input + 4 <= count {
                    let a = values[Int(text[input])], b = values[Int(text[input + 1])]
                    let c = values[Int(text[input + 2])], d = values[Int(text[input + 3])]
                    guard (a | b | c | d) & 0x80 == 0 else {
                        valid = false
                        break
                    }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    buffer[out] = UInt8(truncatingIfNeeded: group >> 16)
                    buffer[out + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    buffer[out + 2] = UInt8(truncatingIfNeeded: group)
                    input += 4
                    out += 3
                }
                if valid && tail > 0 {
                    let a = values[Int(text[input])], b = values[Int(text[input + 1])]
                    let c = tail == 3 ? values[Int(text[input + 2])] : 0
                    // Non-zero unused bits would be a second spelling of the same bytes.
                    if (a | b | c) & 0x80 != 0 || (tail == 2 ? b & 0x0F : c & 0x03) != 0 {
                        valid = false
                    } else {
                        let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                        buffer[out] = UInt8(truncatingIfNeeded: group >> 16)
                        if tail == 3 { buffer[out + 1] = UInt8(truncatingIfNeeded: group >> 8) }
                        out += tail - 1
                    }
                }
                initialized = valid ? out : 0
            }
            return valid ? output : nil
        }
    }

    static func encode(_ bytes: some Collection<UInt8>, alphabet: Alphabet, padded: Bool) -> String {
        let alphabet = alphabet.characters
        var output = [UInt8]()
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in bytes {
            accumulator = accumulator << 8 | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int(accumulator >> UInt32(bits) & 0x3F)])
            }
            accumulator &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { output.append(alphabet[Int(accumulator << UInt32(6 - bits) & 0x3F)]) }
        if padded { while output.count % 4 != 0 { output.append(UInt8(ascii: "=")) } }
        return String(decoding: output, as: UTF8.self)
    }
}
