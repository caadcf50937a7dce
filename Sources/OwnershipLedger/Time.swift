public import Foundation
public import LedgerCore

/// Parsing and printing of times: ISO-8601 or milliseconds since the epoch.
public enum LedgerTime {
    /// Parses `2026-11-29T12:00:00Z`, `2026-11-29T12:00:00.250Z` or `1764417600000`; nil otherwise.
    public static func parse(_ text: String) -> Timestamp? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let ms = Int64(trimmed) { return ms }
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime]] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: trimmed) { return Timestamp((date.timeIntervalSince1970 * 1000).rounded()) }
        }
        return nil
    }

    /// ISO-8601 with milliseconds, UTC.
    public static func format(_ time: Timestamp) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(time) / 1000))
    }

    /// The ledger clock: the only place outside tests that reads the time.
    public static func now() -> Timestamp { Timestamp((Date().timeIntervalSince1970 * 1000).rounded()) }
}

/// A JSON object printed with sorted keys on one line.
public typealias JSONObject = [String: Any]

public enum JSONLine {
    /// One line of JSON, keys sorted, slashes unescaped.
    public static func render(_ object: JSONObject) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return #"{"decision":"invalid","code":"internal","message":"response could not be encoded"}"#
        }
        return String(decoding: data, as: UTF8.self)
    }
}
