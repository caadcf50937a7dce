import Foundation
import StrictJSON

/// The JSON Schema files of docs/schemas, which document every JSON output of `ledger`, and a
/// validator for the part of JSON Schema (draft 2020-12) they use: `type`, `enum`, `const`,
/// `properties`, `required`, `additionalProperties`, `items`, `minItems`, `maxItems`, `oneOf`, `anyOf`,
/// `pattern`, `minimum`, `$ref` (to `#/$defs/…` or `FILE.schema.json[#/$defs/…]` in the directory)
/// and `$defs`. Annotations (`$schema`, `$id`, `title`, `description`, `examples`) are ignored; any
/// other keyword is an error, so a schema cannot claim more than is checked.
public struct OutputSchemas: Sendable {
    public static let directory = LedgerBinary.packageRoot.appendingPathComponent("docs/schemas")
    /// Every schema file, by file name.
    public let files: [String: JSONValue]

    public static let shared: OutputSchemas = {
        do {
            return try OutputSchemas(directory: directory)
        } catch {
            fatalError("docs/schemas: \(error)")
        }
    }()

    public init(directory: URL) throws {
        var files: [String: JSONValue] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasSuffix(".schema.json") {
            let data = try Data(contentsOf: directory.appendingPathComponent(name))
            files[name] = try JSONReader().value(data)
        }
        self.files = files
    }

    /// Why `json` (one JSON document) does not match the schema in file `name`; empty when it does.
    public func problems(_ json: String, against name: String) -> [String] {
        do {
            return problems(try JSONReader(maximumDepth: 64, maximumBytes: 64 << 20).value(Array(json.utf8)), against: name)
        } catch {
            return ["not JSON: \(error)"]
        }
    }

    /// Why `value` does not match the schema in file `name`; empty when it does.
    public func problems(_ value: JSONValue, against name: String) -> [String] {
        guard let schema = files[name] else { return ["no schema \(name) in docs/schemas"] }
        var out: [String] = []
        check(value, schema, file: name, path: "$", into: &out)
        return out
    }

    private static let annotations: Set<String> = ["$schema", "$id", "title", "description", "examples", "$defs", "$comment"]
    private static let keywords: Set<String> = [
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "oneOf",
        "anyOf", "pattern", "minimum", "$ref",
    ]

    private func check(_ value: JSONValue, _ schema: JSONValue, file: String, path: String, into out: inout [String]) {
        if case .bool(let allowed) = schema {
            if !allowed { out.append("\(path): not allowed here") }
            return
        }
        guard let members = schema.members else {
            out.append("\(file): a schema at \(path) is not an object")
            return
        }
        for key in members.keys where !Self.keywords.contains(key) && !Self.annotations.contains(key) {
            out.append("\(file): unsupported keyword \(key) (at \(path))")
        }
        if let reference = members["$ref"]?.string {
            guard let (target, targetFile) = resolve(reference, from: file) else {
                out.append("\(file): unresolved $ref \(reference)")
                return
            }
            check(value, target, file: targetFile, path: path, into: &out)
        }
        if let type = members["type"] {
            let types = type.elements?.compactMap(\.string) ?? type.string.map { [$0] } ?? []
            if !types.contains(where: { Self.matches(value, type: $0) }) {
                out.append("\(path): \(value.kind) where \(types.joined(separator: " or ")) was expected")
                return
            }
        }
        if let options = members["enum"]?.elements, !options.contains(value) {
            out.append("\(path): \(Self.describe(value)) is not one of the allowed values")
        }
        if let constant = members["const"], constant != value { out.append("\(path): \(Self.describe(value)) is not \(Self.describe(constant))") }
        if let pattern = members["pattern"]?.string, let text = value.string {
            if text.range(of: pattern, options: .regularExpression) == nil {
                out.append("\(path): \(text.debugDescription) does not match \(pattern)")
            }
        }
        if let minimum = members["minimum"], case .integer(let bound) = minimum, case .integer(let number) = value, number < bound {
            out.append("\(path): \(number) is below \(bound)")
        }
        if let object = value.members {
            let properties = members["properties"]?.members ?? JSONMembers()
            for key in members["required"]?.elements?.compactMap(\.string) ?? [] where object[key] == nil {
                out.append("\(path): \(key) is missing")
            }
            for (key, member) in object.pairs {
                if let property = properties[key] {
                    check(member, property, file: file, path: "\(path).\(key)", into: &out)
                } else if let additional = members["additionalProperties"] {
                    check(member, additional, file: file, path: "\(path).\(key)", into: &out)
                }
            }
        }
        if let elements = value.elements {
            if let items = members["items"] {
                for (index, element) in elements.enumerated() { check(element, items, file: file, path: "\(path)[\(index)]", into: &out) }
            }
            if case .integer(let least)? = members["minItems"], elements.count < least { out.append("\(path): fewer than \(least) items") }
            if case .integer(let most)? = members["maxItems"], elements.count > most { out.append("\(path): more than \(most) items") }
        }
        if let options = members["oneOf"]?.elements {
            let matching = options.filter { option in
                var sub: [String] = []
                check(value, option, file: file, path: path, into: &sub)
                return sub.isEmpty
            }
            if matching.count != 1 { out.append("\(path): matches \(matching.count) of the oneOf schemas, not exactly one") }
        }
        if let options = members["anyOf"]?.elements {
            var first: [String] = []
            let any = options.enumerated().contains { index, option in
                var sub: [String] = []
                check(value, option, file: file, path: path, into: &sub)
                if index == 0 { first = sub }
                return sub.isEmpty
            }
            if !any { out.append("\(path): matches none of the anyOf schemas (the first says: \(first.prefix(3).joined(separator: "; ")))") }
        }
    }

    /// The schema a `$ref` names, and the file it is in.
    private func resolve(_ reference: String, from file: String) -> (JSONValue, String)? {
        let parts = reference.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let target = parts[0].isEmpty ? file : parts[0]
        guard var schema = files[target] else { return nil }
        if parts.count == 2, !parts[1].isEmpty {
            for component in parts[1].split(separator: "/") {
                guard let next = schema.members?[String(component)] else { return nil }
                schema = next
            }
        }
        return (schema, target)
    }

    private static func matches(_ value: JSONValue, type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("integer", .integer), ("number", .integer), ("number", .number), ("string", .string),
            ("array", .array), ("object", .object):
            true
        default: false
        }
    }

    private static func describe(_ value: JSONValue) -> String { JSONWriter.string(value) }
}
