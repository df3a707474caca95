import CSQLite
import Foundation

/// SQLite through its C API, as an app that chose it would use it: WAL, `synchronous=FULL`, prepared statements, and
/// rows read into Swift values. The baseline of the figures an app developer compares Tributary with.
final class SQLiteBaseline {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    private var handle: OpaquePointer?

    /// Opens (or creates) the database file at `path` in WAL mode with full syncs, and runs `schema`.
    init(path: String, schema: String) throws {
        guard sqlite3_open(path, &handle) == SQLITE_OK else {
            throw Failure(description: "sqlite3_open \(path): \(String(cString: sqlite3_errmsg(handle)))")
        }
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA synchronous=FULL")
        try execute(schema)
    }

    deinit { sqlite3_close_v2(handle) }

    /// Runs `body` in one transaction (one durable commit at its end).
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN")
        let result = try body()
        try execute("COMMIT")
        return result
    }

    func execute(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
            throw Failure(description: "\(sql): \(String(cString: sqlite3_errmsg(handle)))")
        }
    }

    /// A prepared statement, reset and bound again for each use.
    final class Statement {
        private var statement: OpaquePointer?
        private let database: OpaquePointer?

        init(_ sql: String, in baseline: SQLiteBaseline) throws {
            database = baseline.handle
            guard sqlite3_prepare_v2(baseline.handle, sql, -1, &statement, nil) == SQLITE_OK else {
                throw Failure(description: "prepare \(sql): \(String(cString: sqlite3_errmsg(baseline.handle)))")
            }
        }

        deinit { sqlite3_finalize(statement) }

        /// The values a row holds, as the query reads them.
        enum Column {
            case int(Int64)
            case double(Double)
            case text(String)
            case null
        }

        /// Runs the statement with `arguments` (Int64, Double, String or Bool), calling `row` with each result row's
        /// columns. Returns the number of rows.
        @discardableResult
        func run(_ arguments: [Any], row: (([Column]) -> Void)? = nil) throws -> Int {
            sqlite3_reset(statement)
            for (index, argument) in arguments.enumerated() {
                let position = Int32(index + 1)
                switch argument {
                case let value as Int64: sqlite3_bind_int64(statement, position, value)
                case let value as Int: sqlite3_bind_int64(statement, position, Int64(value))
                case let value as Double: sqlite3_bind_double(statement, position, value)
                case let value as Bool: sqlite3_bind_int64(statement, position, value ? 1 : 0)
                case let value as String: sqlite3_bind_text(statement, position, value, -1, sqliteTransient())
                default: throw Failure(description: "cannot bind \(argument)")
                }
            }
            var rows = 0
            while true {
                let result = sqlite3_step(statement)
                if result == SQLITE_DONE { break }
                guard result == SQLITE_ROW else {
                    throw Failure(description: "step: \(String(cString: sqlite3_errmsg(database)))")
                }
                rows += 1
                if let row {
                    var columns: [Column] = []
                    let count = sqlite3_column_count(statement)
                    columns.reserveCapacity(Int(count))
                    for column in 0..<count {
                        switch sqlite3_column_type(statement, column) {
                        case SQLITE_INTEGER: columns.append(.int(sqlite3_column_int64(statement, column)))
                        case SQLITE_FLOAT: columns.append(.double(sqlite3_column_double(statement, column)))
                        case SQLITE_TEXT:
                            columns.append(.text(String(cString: sqlite3_column_text(statement, column))))
                        default: columns.append(.null)
                        }
                    }
                    row(columns)
                }
            }
            return rows
        }
    }
}

extension SQLiteBaseline {
    /// A database of the storage benchmarks' `Item`s (StorageBenchmarks.schema), empty.
    static func items(_ path: String) throws -> SQLiteBaseline {
        try SQLiteBaseline(
            path: path,
            schema: "CREATE TABLE IF NOT EXISTS Item (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                + "count INTEGER NOT NULL, price REAL NOT NULL, active INTEGER NOT NULL)")
    }

    /// Inserts items 0..<count (StorageBenchmarks.values), in one transaction.
    static func insertItems(_ count: Int, into database: SQLiteBaseline) throws {
        let insert = try Statement(
            "INSERT INTO Item (id, name, count, price, active) VALUES (?, ?, ?, ?, ?)", in: database)
        try database.transaction {
            for index in 0..<count {
                try insert.run([
                    index, "item-\(index)-\(index &* 2_654_435_761 % 100_000)", index % 1000, Double(index) * 0.25,
                    index % 2 == 0,
                ])
            }
        }
    }

    /// A database of the query benchmarks' `Message`s (QueryBenchmarks.schema), `count` of them, with an index on
    /// `conversation`, as the Tributary side has.
    static func messages(_ path: String, count: Int) throws -> SQLiteBaseline {
        let database = try SQLiteBaseline(
            path: path,
            schema: "CREATE TABLE Message (id INTEGER PRIMARY KEY, conversation INTEGER NOT NULL, text TEXT NOT NULL, "
                + "score REAL NOT NULL, timestamp REAL NOT NULL); "
                + "CREATE INDEX MessageConversation ON Message (conversation); "
                + "CREATE INDEX MessageTimestamp ON Message (timestamp)")
        let insert = try Statement(
            "INSERT INTO Message (id, conversation, text, score, timestamp) VALUES (?, ?, ?, ?, ?)", in: database)
        try database.transaction {
            for index in 0..<count {
                try insert.run([index, index % 1000, "message number \(index)", Double(index % 977), Double(index)])
            }
        }
        return database
    }
}

/// SQLite's SQLITE_TRANSIENT: it copies bound text before the call returns.
private func sqliteTransient() -> sqlite3_destructor_type { unsafeBitCast(-1, to: sqlite3_destructor_type.self) }
