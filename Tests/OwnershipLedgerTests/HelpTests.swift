import Foundation
import LedgerTestSupport
import Testing

@testable import ledger

/// `ledger --help` and README.md against the command dispatcher's own table (`commands` in
/// Sources/ledger/Commands.swift, read here rather than copied): every command the binary runs is
/// listed with its one-line description, has its own `--help`, and is in README.md's command table.
@Suite struct HelpTests {
    @Test @MainActor func helpAndTheReadmeListEveryCommandTheDispatcherRuns() throws {
        let help = try LedgerBinary.run(["--help"])
        #expect(help.status == 0, "\(help.stderr)")
        let listed = help.stdout.components(separatedBy: "\n").drop { $0 != "Commands:" }.dropFirst().prefix { !$0.isEmpty }
        let readme = try String(contentsOf: LedgerBinary.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(!commands.isEmpty)
        #expect(Set(commands.map { $0.name }).count == commands.count, "two commands share a name")
        #expect(listed.count == commands.count, "\(help.stdout)")
        for (line, command) in zip(listed, commands) {
            #expect(!command.abstract.isEmpty && !command.abstract.contains("\n"), "\(command.name) needs a one-line description")
            let words = line.split(separator: " ", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(words == [command.name, command.abstract], "`ledger --help` lists \(command.name) as: \(line)")
            #expect(readme.contains("| `\(command.name)` |"), "README.md's command table does not describe \(command.name)")
            let usage = try LedgerBinary.run([command.name, "--help"])
            #expect(usage.status == 0 && usage.stdout.contains("ledger \(command.name)"), "\(command.name) --help: \(usage.stdout)")
        }
    }

    @Test func anUnknownCommandIsAUsageErrorThatNamesIt() throws {
        let directory = TemporaryDirectory("ledger-help")
        defer { directory.remove() }
        let unknown = try LedgerBinary.run(["frobnicate", "--store", directory.path("store").path])
        #expect(unknown.status == 2)
        #expect(unknown.stdout.isEmpty)
        #expect(unknown.stderr.hasPrefix("error: unknown command frobnicate"), "\(unknown.stderr)")
        #expect(unknown.stderr.contains("Commands:"), "the error lists the commands there are")
        #expect(!FileManager.default.fileExists(atPath: directory.path("store").path), "nothing was created")
        let none = try LedgerBinary.run([])
        #expect(none.status == 2)
        #expect(none.stdout.contains("Commands:"))
    }
}
