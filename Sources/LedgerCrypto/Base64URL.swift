import Foundation

/// Base64url without padding, as JWS and JWT segments use it.
public enum Base64URL {
    /// Strict, canonical base64url without padding: any other spelling of the same bytes is refused,
    /// so a JWS segment has exactly one textual form.
    public static func decode(_ text: Substring) -> [UInt8]? {
        var standard = ""
        standard.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.unicodeScalars.append(UnicodeScalar(byte))
            case UInt8(ascii: "-"): standard.append("+")
            case UInt8(ascii: "_"): standard.append("/")
            default: return nil
            }
        }
        switch standard.utf8.count % 4 {
        case 1: return nil
        case 2: standard += "=="
        case 3: standard += "="
        default: break
        }
        guard let data = Data(base64Encoded: standard) else { return nil }
        let bytes = [UInt8](data)
        guard encode(bytes) == text else { return nil }  // non-canonical trailing bits
        return bytes
    }

    public static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
