import Foundation
import Testing
import TributaryModel
import TributaryQuery

/// `geoWithin` on points stored as embedded GeoJSON-shaped objects, with the results Realm's own geospatial tests give
/// on the same points and shapes.
@Suite("geoWithin: boxes, circles and polygons on the sphere") struct GeospatialQueryTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "PointOfInterest",
            properties: [
                .scalar("_id", .int), .scalar("name", .string, optional: true),
                Property("location", .embedded("Location")),
                Property("locations", .embedded("Location"), list: true),
                Property("other", .embedded("NotAPoint")),
            ]),
        .embedded(
            "Location", properties: [.scalar("type", .string), Property("coordinates", .scalar(.double), list: true)]),
        .embedded(
            "NotAPoint", properties: [.scalar("type", .string), Property("coordinates", .scalar(.int), list: true)]),
    ])

    static func location(_ longitude: Double, _ latitude: Double, type: String = "Point") -> Value {
        .embedded(
            EmbeddedObject(
                type: "Location",
                fields: ["type": .string(type), "coordinates": .list([.double(longitude), .double(latitude)])]))
    }

    /// The points of Realm's tests: ids 1 to 7, the last one out of bounds.
    static let points: [(PrimaryKey, [String: Value])] = [
        (1, 0, 0), (2, 50.5, 50.5), (3, 40, -40), (4, -30, -30.5), (5, -25, 25), (6, 0.01, 89.9), (7, 2129.01, 89.9),
    ].map { id, longitude, latitude in
        (.int(id), ["_id": .int(id), "location": location(longitude, latitude)])
    }

    static func ids(_ text: String, _ arguments: [Value] = [], in objects: [(PrimaryKey, [String: Value])] = points)
        throws(QueryError) -> [Int64]
    {
        let query = try Query(
            text, arguments: arguments, type: schema[type: "PointOfInterest"]!, schema: schema)
        return query.apply(to: objects, source: InMemoryObjectSource()).map {
            guard case .int(let id) = $0.0 else { return -1 }
            return id
        }
    }

    static func error(_ text: String, _ arguments: [Value] = []) -> QueryError? {
        do {
            _ = try ids(text, arguments)
            return nil
        } catch {
            return error
        }
    }

    @Test(
        "The results Realm's tests give",
        arguments: [
            ("location geoWithin geoCircle([0, 0], 0.001)", [1]),
            ("location geoWithin geoCircle([2.34, -4.6], 1.5)", [1, 2, 3, 4, 5]),
            ("location geoWithin geoCircle([-32.34, -25.0], 0.5)", [4]),
            ("location geoWithin geoCircle([-75.234, 45.023], 0.01)", []),
            ("location geoWithin geoCircle([0, 90], 0.5)", [6]),
            ("location geoWithin geoBox([-1.0, -1.0], [1.0, 1.0])", [1]),
            ("location geoWithin geoBox([-90.23, -80.25], [85.24, 88.0])", [1, 2, 3, 4, 5]),
            ("location geoWithin geoBox([30.0, -50.0], [45.0, -35.0])", [3]),
            ("location geoWithin geoBox([-45.05, -10.2], [-35.24, 5.02])", []),
            // An altitude is taken and ignored.
            ("location geoWithin geoBox([50, 50, 10], [52, 52, 10])", [2]),
            (
                "location geoWithin geoPolygon({[-2.0, -2.0], [3.45, -4.23], [2.56, 4.62], [-3.23, 2.5], [-2.0, -2.0]})",
                [1]
            ),
            ("location geoWithin geoPolygon({[50.0, -50.0], [55.0, 55.0], [1.0, 1.0], [50.0, -50.0]})", [2, 3]),
            // The same ring the other way round: larger than a hemisphere, it stands for the smaller region.
            ("location geoWithin geoPolygon({[50.0, -50.0], [1.0, 1.0], [55.0, 55.0], [50.0, -50.0]})", [2, 3]),
            ("location geoWithin geoPolygon({[-20.0, -20.0], [-10.0, 10.0], [-50.0, 0], [-20.0, -20.0]})", []),
            (
                "location geoWithin geoPolygon({[-44.0, -44.0], [44.0, -44.0], [44.0, 44.0], [-44.0, 44.0], [-44.0, -44.0]}, "
                    + "{[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]})",
                [3, 4, 5]
            ),
            (
                "location geoWithin geoPolygon({[-44, -44], [44, -44], [44, 44], [-44, 44], [-44, -44]}, "
                    + "{[-1, -1], [-1, 1], [1, 1], [1, -1], [-1, -1]}, {[-31, -31], [-28, -31], [-28, -28], [-31, -28], [-31, -31]})",
                [3, 5]
            ),
            // Two regions at once.
            (
                "location geoWithin geoBox([-74, 2], [60, 60]) AND location geoWithin "
                    + "geoPolygon({[50, -50], [55, 55], [1, 1], [50, -50]})", [2]
            ),
            ("NOT location geoWithin geoBox([-1, -1], [1, 1])", [2, 3, 4, 5, 6, 7]),
            ("location GEOWITHIN GEOBOX([-1, -1], [1, 1]) OR _id == 7", [1, 7]),
        ] as [(String, [Int64])])
    func realmResults(query: String, expected: [Int64]) throws {
        #expect(try Self.ids(query) == expected, "\(query)")
    }

    @Test("Numbers of a shape may be arguments, as in Realm")
    func coordinateArguments() throws {
        #expect(try Self.ids("location geoWithin geoCircle([$0, $1], $2)", [0, 0, 0.001]) == [1])
        #expect(
            try Self.ids("location geoWithin geoBox([$0, $1], [$2, $3])", [-90.23, -80.25, 85.24, 88.0])
                == [1, 2, 3, 4, 5])
        #expect(
            try Self.ids("location geoWithin geoPolygon({[$0, $1], [$2, $2], [$3, 3], [$0, $1]})", [50, -50, 55, 1])
                == [2, 3])
        #expect(try Self.ids("location geoWithin geoCircle([%@, %@], %@)", [-32.34, -25, 0.5]) == [4])
    }

    @Test("A list of points: ANY by default, ALL and NONE when written")
    func listsOfPoints() throws {
        let objects: [(PrimaryKey, [String: Value])] = [
            (.int(8), ["_id": 8, "locations": .list([Self.location(56, 56), Self.location(80, 80)])]),
            (.int(9), ["_id": 9, "locations": .list([Self.location(-56, -56), Self.location(-80, -80)])]),
            (.int(10), ["_id": 10, "locations": .list([Self.location(55, 55), Self.location(57, 58)])]),
        ]
        #expect(try Self.ids("locations geoWithin geoBox([50, 50], [60, 60])", in: objects) == [8, 10])
        #expect(try Self.ids("ANY locations geoWithin geoBox([50, 50], [60, 60])", in: objects) == [8, 10])
        #expect(try Self.ids("ALL locations geoWithin geoBox([50, 50], [60, 60])", in: objects) == [10])
        #expect(try Self.ids("NONE locations geoWithin geoBox([50, 50], [60, 60])", in: objects) == [9])
    }

    @Test("What is not a point is within nothing: another type, too few coordinates, no location")
    func notPoints() throws {
        let objects: [(PrimaryKey, [String: Value])] = [
            (.int(1), ["_id": 1, "location": Self.location(0, 0, type: "Polygon")]),
            (.int(2), ["_id": 2, "location": Self.location(0, 0, type: "pOiNt")]),
            (
                .int(3),
                [
                    "_id": 3,
                    "location": .embedded(
                        EmbeddedObject(
                            type: "Location", fields: ["type": "Point", "coordinates": .list([.double(0)])])),
                ]
            ),
            (.int(4), ["_id": 4]),
        ]
        #expect(try Self.ids("location geoWithin geoCircle([0, 0], 0.1)", in: objects) == [2])
        #expect(try Self.ids("NOT location geoWithin geoCircle([0, 0], 0.1)", in: objects) == [1, 3, 4])
    }

    @Test("Edges: a box across the antimeridian, shapes' boundaries, a circle of half the sphere and more")
    func edges() throws {
        let objects: [(PrimaryKey, [String: Value])] = [
            (179.5, 0), (-179.5, 0), (180, 10), (0, 0), (10, 10), (-10, -10), (0, -90),
        ].enumerated().map { index, point in
            (.int(Int64(index + 1)), ["_id": .int(Int64(index + 1)), "location": Self.location(point.0, point.1)])
        }
        // From longitude 170 eastwards to -170.
        #expect(try Self.ids("location geoWithin geoBox([170, -20], [-170, 20])", in: objects) == [1, 2, 3])
        // Corners and edges of a box are in it.
        #expect(try Self.ids("location geoWithin geoBox([0, 0], [10, 10])", in: objects) == [4, 5])
        // A vertex, and a point on an edge, of a polygon are in it.
        #expect(
            try Self.ids("location geoWithin geoPolygon({[0, 0], [20, 0], [0, 20], [0, 0]})", in: objects) == [4, 5])
        #expect(
            try Self.ids("location geoWithin geoPolygon({[-5, 0], [5, 0], [0, 5], [-5, 0]})", in: objects) == [4])
        #expect(try Self.ids("location geoWithin geoCircle([0, 90], 3.1416)", in: objects) == [1, 2, 3, 4, 5, 6, 7])
        #expect(try Self.ids("location geoWithin geoCircle([0, 0], 0)", in: objects) == [4])
    }

    @Test(
        "Shapes Realm refuses are refused, naming the fault",
        arguments: [
            ("location geoWithin geoCircle([-32.34, -25], -1.5)", "non-negative"),
            ("location geoWithin geoCircle([-200, 200], 1.5)", "out of bounds"),
            ("location geoWithin geoCircle([-20, 20, 12], 1.5)", "without an altitude"),
            ("location geoWithin geoBox([1, 1], [-1, -1])", "north of its top-right"),
            ("location geoWithin geoPolygon({[50, -50], [55, 55], [-50, 50], [70, -25]})", "is not closed"),
            ("location geoWithin geoPolygon({[50, -50], [55, 55], [-50, 50], [70, -25], [50, -50]})", "cross"),
            ("location geoWithin geoPolygon({[0, 0], [1, 1], [0, 0]})", "at least 3 different vertices"),
            ("location geoWithin geoPolygon({[0, 0], [1, 0], [1, 1], [1, 0], [0, 0]})", "the same point"),
            (
                "location geoWithin geoPolygon({[0, 0], [10, 0], [10, 10], [0, 0]}, {[20, 20], [21, 20], [21, 21], [20, 20]})",
                "not inside the first ring"
            ),
            (
                "location geoWithin geoPolygon({[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]}, "
                    + "{[1, 1], [9, 1], [9, 9], [1, 9], [1, 1]}, {[2, 2], [3, 2], [3, 3], [2, 3], [2, 2]})",
                "nested"
            ),
            ("location geoWithin geoCircle([0, 0], 'far')", "a number or an argument"),
            ("location geoWithin geoCircle([0, 0], $0)", "finite number"),
            ("location geoWithin geoBox([0], [1, 1])", "[longitude, latitude]"),
            ("location geoWithin geoSquare([0, 0], 1)", "expected geoBox"),
            ("location geoWithin $0", "cannot be an argument"),
            ("name geoWithin geoBox([0, 0], [1, 1])", "not in the format of a geoWithin query"),
            ("other geoWithin geoBox([0, 0], [1, 1])", "not in the format of a geoWithin query"),
            ("ALL location geoWithin geoBox([0, 0], [1, 1])", "needs a list"),
        ] as [(String, String)])
    func refusals(query: String, fragment: String) {
        let failure = Self.error(query, query.contains("$0") ? [.string("x")] : [])
        #expect(failure?.message.contains(fragment) == true, "\(query): \(String(describing: failure))")
    }

    /// Random circles, boxes and convex polygons against random points, each answer checked by a naive evaluator:
    /// haversine distances, plain coordinate ranges, and for a convex polygon the side of every edge.
    @Test("Randomized: every shape's answer matches a naive evaluator's", arguments: [0x6E0, 7, 0x5EED] as [UInt64])
    func randomized(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        func uniform(_ low: Double, _ high: Double) -> Double {
            low + (high - low) * Double(random.next() >> 11) / Double(1 << 53)
        }
        let points: [(Double, Double)] = (0..<400).map { _ in (uniform(-180, 180), uniform(-89, 89)) }
        let objects: [(PrimaryKey, [String: Value])] = points.enumerated().map { index, point in
            (.int(Int64(index)), ["_id": .int(Int64(index)), "location": Self.location(point.0, point.1)])
        }
        func unit(_ longitude: Double, _ latitude: Double) -> (Double, Double, Double) {
            let (lng, lat) = (longitude * .pi / 180, latitude * .pi / 180)
            return (cos(lat) * cos(lng), cos(lat) * sin(lng), sin(lat))
        }
        var checked = 0
        for round in 0..<60 {
            let center = (uniform(-170, 170), uniform(-60, 60))
            let expected: [Int64]
            let text: String
            switch round % 3 {
            case 0:
                let radius = uniform(0.01, 1.2)
                text = "location geoWithin geoCircle([\(center.0), \(center.1)], \(radius))"
                expected = points.indices.filter { index in
                    let (lng1, lat1) = (center.0 * .pi / 180, center.1 * .pi / 180)
                    let (lng2, lat2) = (points[index].0 * .pi / 180, points[index].1 * .pi / 180)
                    let h =
                        pow(sin((lat2 - lat1) / 2), 2) + cos(lat1) * cos(lat2) * pow(sin((lng2 - lng1) / 2), 2)
                    return 2 * asin(min(1, h.squareRoot())) <= radius
                }.map { Int64($0) }
            case 1:
                let width = uniform(1, 120)
                let height = uniform(1, 60)
                let west = max(-180, center.0 - width / 2)
                let east = min(180, center.0 + width / 2)
                let south = max(-90, center.1 - height / 2)
                let north = min(90, center.1 + height / 2)
                text = "location geoWithin geoBox([\(west), \(south)], [\(east), \(north)])"
                expected = points.indices.filter {
                    points[$0].0 >= west && points[$0].0 <= east && points[$0].1 >= south && points[$0].1 <= north
                }.map { Int64($0) }
            default:
                // A convex polygon: vertices around the center at increasing bearings, counterclockwise.
                let count = 3 + Int(random.next() % 6)
                let radius = uniform(2, 25)
                var bearings = (0..<count).map { _ in uniform(0, 2 * .pi) }.sorted()
                if bearings.last! - bearings.first! < .pi {
                    bearings = (0..<count).map { 2 * .pi * Double($0) / Double(count) }
                }
                let vertices = bearings.map { bearing in
                    (center.0 + radius * cos(bearing) / cos(center.1 * .pi / 180), center.1 + radius * sin(bearing))
                }
                let ring = (vertices + [vertices[0]]).map { "[\($0.0), \($0.1)]" }.joined(separator: ", ")
                text = "location geoWithin geoPolygon({\(ring)})"
                let corners = vertices.map { unit($0.0, $0.1) }
                let convex = (0..<count).allSatisfy { index in
                    let (a, b, c) = (corners[index], corners[(index + 1) % count], corners[(index + 2) % count])
                    let normal = (a.1 * b.2 - a.2 * b.1, a.2 * b.0 - a.0 * b.2, a.0 * b.1 - a.1 * b.0)
                    return normal.0 * c.0 + normal.1 * c.1 + normal.2 * c.2 > 0
                }
                guard convex, vertices.allSatisfy({ abs($0.0) <= 180 && abs($0.1) <= 90 }) else { continue }
                expected = points.indices.filter { index in
                    let p = unit(points[index].0, points[index].1)
                    return (0..<count).allSatisfy { edge in
                        let (a, b) = (corners[edge], corners[(edge + 1) % count])
                        let normal = (a.1 * b.2 - a.2 * b.1, a.2 * b.0 - a.0 * b.2, a.0 * b.1 - a.1 * b.0)
                        return normal.0 * p.0 + normal.1 * p.1 + normal.2 * p.2 >= 0
                    }
                }.map { Int64($0) }
            }
            #expect(try Self.ids(text, in: objects) == expected, "\(text)")
            checked += 1
        }
        #expect(checked >= 45, "only \(checked) random shapes were checked")
    }
}
