public import StrictJSON

/// Typed, error-naming access to the members of a JSON object read by ``JSONReader``, in place
/// (``JSONView``). `null` counts as absent; every failure is `.invalidPayload` naming `context.key`.
struct JSONFields {
    let object: JSONView
    let context: String
    /// Whether times with a fraction are floored to whole milliseconds instead of refused: set by
    /// ``readingTimes(of:)`` for a payload whose environment is Xcode or LocalTesting.
    private(set) var floorsFractionalMillis = false

    init(_ object: JSONView, context: String) {
        self.object = object
        self.context = context
    }

    /// The fields of a tree (for callers holding ``JSONMembers``).
    init(_ members: JSONMembers, context: String) throws(VerificationError) {
        do {
            self.init(try JSONDocument(.object(members)).root, context: context)
        } catch {
            throw VerificationError(.invalidPayload, "\(context) is not a valid JSON object: \(error.message)")
        }
    }

    /// These fields with their times read by `environment`'s rule. StoreKit testing in Xcode (and
    /// LocalTesting) signs fractional milliseconds (`1697679936049.7297`), which Apple's libraries
    /// floor: for those two environments a time is floored to whole milliseconds. Every other
    /// environment (or none) takes only plain integers and refuses a fraction with
    /// ``JSONValue/millisecondsRequired(_:)``, the message `ledger submit` gives for `at`.
    func readingTimes(of environment: AppleEnvironment?) -> JSONFields {
        var fields = self
        fields.floorsFractionalMillis = environment?.isLocal == true
        return fields
    }

    /// Reads a JSON object strictly (duplicate keys, nesting and size are refused): its fields.
    init(parsing bytes: some Collection<UInt8>, context: String) throws(VerificationError) {
        let root: JSONView
        do {
            root = try JSONReader().document(bytes).root
        } catch {
            throw VerificationError(.invalidPayload, "\(context) is not a valid JSON object: \(error.message)")
        }
        guard root.isObject else {
            throw VerificationError(.invalidPayload, "\(context) is not a valid JSON object: the JSON value is \(root.kind), not an object")
        }
        self.init(root, context: context)
    }

    /// The value of `key`, nil when absent or null.
    func value(_ key: String) -> JSONView? {
        guard let value = object[key], !value.isNull else { return nil }
        return value
    }

    private func missing(_ key: String) -> VerificationError {
        VerificationError(.invalidPayload, "\(context) is missing \(key)")
    }

    func wrongType(_ key: String, _ expected: String) -> VerificationError {
        VerificationError(.invalidPayload, "\(context).\(key) must be \(expected)")
    }

    func has(_ key: String) -> Bool { value(key) != nil }

    func optionalString(_ key: String) throws(VerificationError) -> String? {
        guard let raw = value(key) else { return nil }
        guard let string = raw.string else { throw wrongType(key, "a string") }
        return string
    }

    func string(_ key: String) throws(VerificationError) -> String {
        guard let string = try optionalString(key) else { throw missing(key) }
        return string
    }

    /// A string that follows `kind`'s rule (``AppleIdentifier``).
    func identifier(_ key: String, _ kind: AppleIdentifier) throws(VerificationError) -> String {
        let value = try string(key)
        if let problem = kind.problem(value, field: "\(context).\(key)") { throw VerificationError(.invalidPayload, problem) }
        return value
    }

    /// Milliseconds since the epoch: a plain integer (no fraction, no exponent), or under
    /// ``readingTimes(of:)`` for Xcode and LocalTesting any number within range, floored.
    func optionalMillis(_ key: String) throws(VerificationError) -> Int64? {
        guard let raw = value(key) else { return nil }
        if let millis = raw.integer { return millis }
        switch raw.number {
        case let millis? where JSONValue.isBeyondInt64(millis):
            throw VerificationError(.invalidPayload, JSONValue.outsideSupportedRange("\(context).\(key)"))
        case let millis? where floorsFractionalMillis:
            if let floored = Int64(exactly: millis.rounded(.down)) { return floored }
        default:
            break
        }
        throw VerificationError(.invalidPayload, JSONValue.millisecondsRequired("\(context).\(key)"))
    }

    func millis(_ key: String) throws(VerificationError) -> Int64 {
        guard let millis = try optionalMillis(key) else { throw missing(key) }
        return millis
    }

    func optionalInt64(_ key: String) throws(VerificationError) -> Int64? {
        guard let raw = value(key) else { return nil }
        guard let integer = raw.integer else { throw wrongType(key, "an integer") }
        return integer
    }

    func optionalInt(_ key: String) throws(VerificationError) -> Int? {
        guard let integer = try optionalInt64(key) else { return nil }
        guard let int = Int(exactly: integer) else { throw wrongType(key, "an integer") }
        return int
    }

    func optionalBool(_ key: String) throws(VerificationError) -> Bool? {
        guard let raw = value(key) else { return nil }
        guard let flag = raw.bool else { throw wrongType(key, "true or false") }
        return flag
    }

    func optionalObject(_ key: String) throws(VerificationError) -> JSONFields? {
        guard let raw = value(key) else { return nil }
        guard raw.isObject else { throw wrongType(key, "an object") }
        return JSONFields(raw, context: "\(context).\(key)")
    }

    func optionalArray(_ key: String) throws(VerificationError) -> [JSONView]? {
        guard let raw = value(key) else { return nil }
        guard raw.isArray else { throw wrongType(key, "an array") }
        return raw.elements
    }

    func environment(_ key: String) throws(VerificationError) -> AppleEnvironment {
        guard let environment = try optionalEnvironment(key) else { throw missing(key) }
        return environment
    }

    func optionalEnvironment(_ key: String) throws(VerificationError) -> AppleEnvironment? {
        guard let raw = try optionalString(key) else { return nil }
        guard let environment = AppleEnvironment(exactly: raw) else {
            throw VerificationError(.invalidPayload, "\(context).\(key) \"\(raw)\" is not one of Production, Sandbox, Xcode, LocalTesting")
        }
        return environment
    }
}

extension JSONValue {
    /// The one message for a time that is not a whole number of milliseconds (a fraction, an
    /// exponent, a string or a boolean), wherever it is read.
    public static func millisecondsRequired(_ field: String) -> String { "\(field) must be a whole number of milliseconds" }

    /// The one message for a time outside 1970 through 9999 (`time`, when it fits in 64 bits),
    /// wherever it is read.
    public static func outsideSupportedRange(_ field: String, _ time: Int64? = nil) -> String {
        "\(field)\(time.map { " \($0)" } ?? "") is outside the supported range (1970 through 9999, in milliseconds)"
    }

    /// True for a number too large in magnitude for 64 bits (however it was written): as a time it
    /// is out of range, not a fraction.
    public static func isBeyondInt64(_ number: Double) -> Bool { !(number > -0x1p63 && number < 0x1p63) }
}
