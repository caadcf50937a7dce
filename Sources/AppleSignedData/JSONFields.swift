import Foundation

/// Typed, error-naming access to a JSON object from `JSONSerialization`.
/// `null` counts as absent; every failure is `.invalidPayload` naming `context.key`.
struct JSONFields {
    let object: [String: Any]
    let context: String

    init(_ object: [String: Any], context: String) {
        self.object = object
        self.context = context
    }

    static func parseObject(_ data: Data, context: String) throws(VerificationError) -> [String: Any] {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: data, options: [])
        } catch {
            throw VerificationError(.invalidPayload, "\(context) is not valid JSON")
        }
        guard let object = parsed as? [String: Any] else {
            throw VerificationError(.invalidPayload, "\(context) is not a JSON object")
        }
        return object
    }

    private func value(_ key: String) -> Any? {
        guard let value = object[key], !(value is NSNull) else { return nil }
        return value
    }

    private func missing(_ key: String) -> VerificationError {
        VerificationError(.invalidPayload, "\(context) is missing \(key)")
    }

    private func wrongType(_ key: String, _ expected: String) -> VerificationError {
        VerificationError(.invalidPayload, "\(context).\(key) must be \(expected)")
    }

    func has(_ key: String) -> Bool { value(key) != nil }

    func optionalString(_ key: String) throws(VerificationError) -> String? {
        guard let raw = value(key) else { return nil }
        guard let string = raw as? String else { throw wrongType(key, "a string") }
        return string
    }

    func string(_ key: String) throws(VerificationError) -> String {
        guard let string = try optionalString(key) else { throw missing(key) }
        return string
    }

    /// Milliseconds since the epoch; fractional values (Xcode) are floored.
    func optionalMillis(_ key: String) throws(VerificationError) -> Int64? {
        guard let raw = value(key) else { return nil }
        guard let millis = JSONFields.millis(raw) else { throw wrongType(key, "a number of milliseconds") }
        return millis
    }

    func millis(_ key: String) throws(VerificationError) -> Int64 {
        guard let millis = try optionalMillis(key) else { throw missing(key) }
        return millis
    }

    func optionalInt64(_ key: String) throws(VerificationError) -> Int64? {
        guard let raw = value(key) else { return nil }
        guard let number = JSONFields.number(raw), let int = number as? Int64 else { throw wrongType(key, "an integer") }
        return int
    }

    func optionalInt(_ key: String) throws(VerificationError) -> Int? {
        guard let raw = value(key) else { return nil }
        guard let number = JSONFields.number(raw), let int = number as? Int else { throw wrongType(key, "an integer") }
        return int
    }

    func optionalBool(_ key: String) throws(VerificationError) -> Bool? {
        guard let raw = value(key) else { return nil }
        guard let number = raw as? NSNumber, JSONFields.isBoolean(number) else { throw wrongType(key, "true or false") }
        return number.boolValue
    }

    func optionalObject(_ key: String) throws(VerificationError) -> JSONFields? {
        guard let raw = value(key) else { return nil }
        guard let object = raw as? [String: Any] else { throw wrongType(key, "an object") }
        return JSONFields(object, context: "\(context).\(key)")
    }

    func optionalArray(_ key: String) throws(VerificationError) -> [Any]? {
        guard let raw = value(key) else { return nil }
        guard let array = raw as? [Any] else { throw wrongType(key, "an array") }
        return array
    }

    func environment(_ key: String) throws(VerificationError) -> AppleEnvironment {
        guard let environment = try optionalEnvironment(key) else { throw missing(key) }
        return environment
    }

    func optionalEnvironment(_ key: String) throws(VerificationError) -> AppleEnvironment? {
        guard let raw = try optionalString(key) else { return nil }
        guard let environment = AppleEnvironment(rawValue: raw) else {
            throw VerificationError(.invalidPayload, "\(context).\(key) \"\(raw)\" is not one of Production, Sandbox, Xcode, LocalTesting")
        }
        return environment
    }

    // MARK: numbers

    static func isBoolean(_ number: NSNumber) -> Bool {
        let kind = String(cString: number.objCType)
        return kind == "c" || kind == "B"
    }

    /// A JSON number that is not a boolean.
    static func number(_ raw: Any) -> NSNumber? {
        guard let number = raw as? NSNumber, !isBoolean(number) else { return nil }
        return number
    }

    /// Whole milliseconds: integers exactly, fractions floored; nil for non-numbers and out-of-range values.
    static func millis(_ raw: Any) -> Int64? {
        guard let number = number(raw) else { return nil }
        if let exact = number as? Int64 { return exact }
        let double = number.doubleValue
        guard double.isFinite, double > -9.2e18, double < 9.2e18 else { return nil }
        return Int64(double.rounded(.down))
    }
}
