import Foundation
public import LedgerCore
public import StrictJSON

/// Parsing and printing of times: ISO-8601 (UTC or with an offset) or milliseconds since the epoch.
/// Done by hand with the civil-calendar algorithm: fast, allocation-light and identical everywhere.
public enum LedgerTime {
    static let millisecondsPerDay: Int64 = 86_400_000

    /// The times the ledger accepts: 1970-01-01T00:00:00.000Z through 9999-12-31T23:59:59.999Z.
    public static let supportedRange: ClosedRange<Timestamp> = 0...253_402_300_799_999

    /// Parses `2026-11-29T12:00:00Z`, `2026-11-29T12:00:00.250Z`, `2026-11-29T13:00:00+01:00` or
    /// `1764417600000` (digits only, no sign, no leading zero, no surrounding space), within
    /// ``supportedRange``; a second of 60 only where UTC has its leap seconds, at 23:59:60; nil otherwise.
    public static func parse(_ text: String) -> Timestamp? {
        let c = Array(text.utf8)
        if !c.isEmpty, c.allSatisfy({ (48...57).contains($0) }) {
            guard c.count == 1 || c[0] != 48, let ms = Int64(text) else { return nil }
            return supportedRange.contains(ms) ? ms : nil
        }
        func number(_ range: Range<Int>) -> Int64? {
            guard range.upperBound <= c.count else { return nil }
            var value: Int64 = 0
            for index in range {
                guard (48...57).contains(c[index]) else { return nil }
                value = value * 10 + Int64(c[index] - 48)
            }
            return value
        }
        guard c.count >= 20, c[4] == 0x2D, c[7] == 0x2D, c[10] == 0x54 || c[10] == 0x74, c[13] == 0x3A, c[16] == 0x3A,
            let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var index = 19
        var fraction: Int64 = 0
        if c[index] == 0x2E {
            index += 1
            var digits = 0
            while index < c.count, (48...57).contains(c[index]) {
                if digits < 3 { fraction = fraction * 10 + Int64(c[index] - 48) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            if digits < 3 { for _ in digits..<3 { fraction *= 10 } }
        }
        var offset: Int64 = 0
        guard index < c.count else { return nil }
        switch c[index] {
        case 0x5A, 0x7A:
            guard index + 1 == c.count else { return nil }
        case 0x2B, 0x2D:
            guard index + 6 == c.count, c[index + 3] == 0x3A, let hours = number(index + 1..<index + 3),
                let minutes = number(index + 4..<index + 6), hours < 24, minutes < 60
            else { return nil }
            offset = (hours * 60 + minutes) * 60_000 * (c[index] == 0x2B ? 1 : -1)
        default:
            return nil
        }
        if second == 60 {
            let utcMinute = ((hour * 60 + minute) * 60_000 - offset) % millisecondsPerDay
            guard (utcMinute + millisecondsPerDay) % millisecondsPerDay == 86_340_000 else { return nil }
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        let time = days * millisecondsPerDay + ((hour * 60 + minute) * 60 + second) * 1000 + fraction - offset
        return supportedRange.contains(time) ? time : nil
    }

    /// ISO-8601 with milliseconds, UTC: `2026-11-29T12:00:00.000Z`. A time beyond ±100,000 years
    /// (never accepted, but possible in a hand-made record) prints as its number of milliseconds.
    public static func format(_ time: Timestamp) -> String {
        guard (-3_155_760_000_000_000...3_155_760_000_000_000).contains(time) else { return "\(time)ms" }
        let days = time >= 0 ? time / millisecondsPerDay : (time - millisecondsPerDay + 1) / millisecondsPerDay
        let ms = time - days * millisecondsPerDay
        let (year, month, day) = civilFromDays(days)
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
        }
        let seconds = ms / 1000
        if (0...9999).contains(year) {
            // The common case, written digit by digit (this runs for every answer `submit` renders).
            return String(unsafeUninitializedCapacity: 24) { buffer in
                var index = 0
                func put(_ value: Int64, _ width: Int, _ separator: Unicode.Scalar) {
                    var rest = value
                    for digit in (index..<index + width).reversed() {
                        buffer[digit] = 0x30 + UInt8(rest % 10)
                        rest /= 10
                    }
                    buffer[index + width] = UInt8(ascii: separator)
                    index += width + 1
                }
                put(year, 4, "-")
                put(month, 2, "-")
                put(day, 2, "T")
                put(seconds / 3600, 2, ":")
                put(seconds / 60 % 60, 2, ":")
                put(seconds % 60, 2, ".")
                put(ms % 1000, 3, "Z")
                return index
            }
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(seconds / 3600, 2)):\(pad(seconds / 60 % 60, 2)):"
            + "\(pad(seconds % 60, 2)).\(pad(ms % 1000, 3))Z"
    }

    /// The ledger clock: the only place outside tests that reads the time.
    public static func now() -> Timestamp { Timestamp((Date().timeIntervalSince1970 * 1000).rounded()) }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civilFromDays(_ days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

/// A JSON object as the query commands build it, printed with ``JSONLine/render(_:)``.
public typealias JSONObject = [String: Any]

public enum JSONLine {
    /// One line of JSON (``JSONWriter``: keys sorted by bytes, slashes unescaped).
    public static func render(_ object: JSONObject) -> String { JSONWriter.string(JSONValue(any: object)) }
}

extension JSONValue {
    /// The JSON form of a value built in a ``JSONObject``: strings, numbers and booleans (Swift or
    /// `NSNumber`), `NSNull` or nil, arrays, dictionaries with string keys, and ``JSONValue`` itself.
    /// Anything else is written as its description.
    public init(any value: Any) {
        switch value {
        case let value as JSONValue: self = value
        case let value as JSONMembers: self = .object(value)
        case let value as String: self = .string(value)
        case is NSNull: self = .null
        case let value as NSNumber:
            switch String(cString: value.objCType) {
            case "c", "B": self = .bool(value.boolValue)
            case "d", "f": self = .number(value.doubleValue)
            case "Q", "L", "I", "S", "C":
                let unsigned = value.uint64Value
                self = unsigned <= UInt64(Int64.max) ? .integer(Int64(unsigned)) : .number(Double(unsigned))
            default: self = .integer(value.int64Value)
            }
        case let value as [Any]: self = .array(value.map(JSONValue.init(any:)))
        case let value as [String: Any]: self = .object(JSONMembers(value.map { ($0.key, JSONValue(any: $0.value)) }))
        default:
            if let optional = value as? any OptionalProtocol {
                self = optional.wrapped.map(JSONValue.init(any:)) ?? .null
            } else {
                self = .string(String(describing: value))
            }
        }
    }
}

/// Lets ``JSONValue/init(any:)`` see through an `Optional` stored as `Any`.
private protocol OptionalProtocol {
    var wrapped: Any? { get }
}

extension Optional: OptionalProtocol {
    fileprivate var wrapped: Any? { self.map { $0 as Any } }
}
