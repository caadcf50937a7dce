/// A PostgreSQL connection URL, `postgres://[user[:password]@][host[:port][,…]][/database][?name=value&…]`
/// (libpq's URI syntax; a Unix socket directory is a percent-encoded host such as `%2Fvar%2Frun%2Fpostgresql`,
/// or `?host=/var/run/postgresql`). It is checked here before libpq sees it, so a mistyped URL is
/// refused with a message that never contains its password: ``description`` shows the URL with the
/// password replaced by `***`, and is what every message, log line and status output uses.
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    /// The URL as given, password included: handed to libpq, never put in a message or a log line.
    public let connectionString: String
    /// The password, from the user information or a `password` parameter (scrubbed from libpq's messages).
    let password: String?
    /// The URL with its password replaced by `***`.
    public let description: String

    /// Why a URL was refused.
    public struct Invalid: Error, CustomStringConvertible, Sendable, Equatable {
        public let description: String
    }

    /// The longest URL accepted.
    public static let maximumLength = 4096

    /// Whether `text` is meant as a PostgreSQL URL (rather than a store directory).
    public static func isURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// Parses and checks `text`. Throws ``Invalid`` naming what is wrong, without repeating the URL.
    public init(_ text: String) throws(Invalid) {
        let bytes = Array(text.utf8)
        guard bytes.count <= Self.maximumLength else {
            throw Invalid(description: "the PostgreSQL URL is \(bytes.count) bytes long, more than \(Self.maximumLength)")
        }
        let scheme: String
        if text.hasPrefix("postgresql://") {
            scheme = "postgresql://"
        } else if text.hasPrefix("postgres://") {
            scheme = "postgres://"
        } else {
            throw Invalid(description: "a PostgreSQL URL starts with postgres:// or postgresql://")
        }
        if let bad = bytes.first(where: { $0 <= 0x20 || $0 == 0x7F || $0 >= 0x80 }) {
            throw Invalid(
                description: bad == 0x20
                    ? "the PostgreSQL URL contains a space: percent-encode it (%20)"
                    : "the PostgreSQL URL contains a control or non-ASCII byte 0x\(String(bad, radix: 16)): percent-encode it")
        }
        var rest = bytes[scheme.utf8.count...]
        var query: ArraySlice<UInt8> = []
        if let mark = rest.firstIndex(of: UInt8(ascii: "?")) {
            query = rest[(mark + 1)...]
            rest = rest[..<mark]
        }
        var authority = rest
        var path: ArraySlice<UInt8> = []
        if let slash = rest.firstIndex(of: UInt8(ascii: "/")) {
            authority = rest[..<slash]
            path = rest[(slash + 1)...]
        }
        var password: String?
        var redactedAuthority = String(decoding: authority, as: UTF8.self)
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) {
            let userinfo = authority[..<at]
            let hosts = authority[(at + 1)...]
            var user = userinfo
            if let colon = userinfo.firstIndex(of: UInt8(ascii: ":")) {
                user = userinfo[..<colon]
                password = try Self.decode(userinfo[(colon + 1)...], what: "password")
            }
            _ = try Self.decode(user, what: "user name")
            try Self.checkHosts(hosts)
            redactedAuthority =
                String(decoding: user, as: UTF8.self) + (password == nil ? "" : ":***") + "@" + String(decoding: hosts, as: UTF8.self)
        } else {
            try Self.checkHosts(authority)
        }
        _ = try Self.decode(path, what: "database name")
        var redactedQuery: [String] = []
        if !query.isEmpty {
            for pair in query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false) {
                guard let equals = pair.firstIndex(of: UInt8(ascii: "=")), equals > pair.startIndex else {
                    throw Invalid(description: "a parameter of the PostgreSQL URL is not name=value")
                }
                let name = try Self.decode(pair[..<equals], what: "parameter name")
                let value = try Self.decode(pair[(equals + 1)...], what: "value of parameter \(name)")
                guard name.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) }) else {
                    throw Invalid(description: "the PostgreSQL URL has a parameter name that is not lower-case letters, digits and _")
                }
                if name == "password" {
                    password = value
                    redactedQuery.append("password=***")
                } else {
                    redactedQuery.append(String(decoding: pair, as: UTF8.self))
                }
            }
        }
        connectionString = text
        self.password = password
        description =
            scheme + redactedAuthority + (path.isEmpty && !rest.contains(UInt8(ascii: "/")) ? "" : "/" + String(decoding: path, as: UTF8.self))
            + (redactedQuery.isEmpty ? "" : "?" + redactedQuery.joined(separator: "&"))
    }

    /// Hosts: comma-separated `host[:port]`, a host being a name, an address, `[IPv6]` or a
    /// percent-encoded socket directory; ports are decimal.
    private static func checkHosts(_ hosts: ArraySlice<UInt8>) throws(Invalid) {
        for entry in hosts.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            var host = entry
            var port: ArraySlice<UInt8> = []
            if host.first == UInt8(ascii: "[") {
                guard let close = host.firstIndex(of: UInt8(ascii: "]")) else {
                    throw Invalid(description: "an IPv6 host of the PostgreSQL URL lacks its closing ]")
                }
                port = host[(close + 1)...]
                host = host[host.startIndex..<close]
                if let first = port.first {
                    guard first == UInt8(ascii: ":") else {
                        throw Invalid(description: "an IPv6 host of the PostgreSQL URL is followed by more than a port")
                    }
                    port = port.dropFirst()
                }
            } else if let colon = host.lastIndex(of: UInt8(ascii: ":")) {
                port = host[(colon + 1)...]
                host = host[..<colon]
            }
            _ = try decode(host, what: "host")
            guard port.allSatisfy({ (0x30...0x39).contains($0) }), port.count <= 5 else {
                throw Invalid(description: "a port of the PostgreSQL URL is not a number")
            }
            if !port.isEmpty, let number = Int(String(decoding: port, as: UTF8.self)), !(1...65535).contains(number) {
                throw Invalid(description: "a port of the PostgreSQL URL is outside 1–65535")
            }
        }
    }

    /// Percent-decodes one component; refuses a malformed escape and one that decodes to a NUL.
    private static func decode(_ component: ArraySlice<UInt8>, what: String) throws(Invalid) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(component.count)
        var index = component.startIndex
        while index < component.endIndex {
            let byte = component[index]
            guard byte == UInt8(ascii: "%") else {
                out.append(byte)
                index += 1
                continue
            }
            guard component.endIndex - index >= 3, let high = hexValue(component[index + 1]), let low = hexValue(component[index + 2]) else {
                throw Invalid(description: "the \(what) in the PostgreSQL URL has a malformed percent escape")
            }
            guard high | low != 0 else { throw Invalid(description: "the \(what) in the PostgreSQL URL contains %00") }
            out.append(high << 4 | low)
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }
}
