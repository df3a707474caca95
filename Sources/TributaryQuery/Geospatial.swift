import Foundation
import TributaryModel

// `geoWithin`: whether a point stored as an embedded GeoJSON-shaped object (`type` "Point", `coordinates`
// [longitude, latitude]) lies within a box, a circle or a polygon, in spherical geometry, as Realm computes it: a box
// is a range of latitudes and longitudes, a circle a spherical cap, and a polygon's edges are great-circle arcs.

/// A point on the sphere, in degrees.
struct GeoPoint: Hashable, Sendable {
    var longitude: Double
    var latitude: Double

    /// Whether the coordinates are numbers within [-180, 180] and [-90, 90].
    var isValid: Bool { abs(longitude) <= 180 && abs(latitude) <= 90 }

    /// The point as a unit vector.
    var vector: GeoVector {
        let lat = latitude * .pi / 180
        let lng = longitude * .pi / 180
        return GeoVector(x: cos(lat) * cos(lng), y: cos(lat) * sin(lng), z: sin(lat))
    }

    /// The point an embedded object stores: its `type` is "Point" (in any case) and its `coordinates` hold the
    /// longitude and the latitude (and an altitude, ignored); `nil` for any other value, as Realm reads it.
    init?(stored value: Value) {
        guard case .embedded(let object) = value, case .string(let type)? = object.fields["type"],
            type.lowercased() == "point", case .list(let coordinates)? = object.fields["coordinates"],
            coordinates.count >= 2, case .double(let longitude) = coordinates[0],
            case .double(let latitude) = coordinates[1]
        else { return nil }
        self.init(longitude: longitude, latitude: latitude)
    }

    init(longitude: Double, latitude: Double) {
        self.longitude = longitude
        self.latitude = latitude
    }

    var description: String { "[\(longitude), \(latitude)]" }
}

/// A vector in space; on the unit sphere, a point.
struct GeoVector: Hashable, Sendable {
    var x: Double
    var y: Double
    var z: Double

    func dot(_ other: GeoVector) -> Double { x * other.x + y * other.y + z * other.z }
    func cross(_ other: GeoVector) -> GeoVector {
        GeoVector(x: y * other.z - z * other.y, y: z * other.x - x * other.z, z: x * other.y - y * other.x)
    }
    static func + (a: GeoVector, b: GeoVector) -> GeoVector { GeoVector(x: a.x + b.x, y: a.y + b.y, z: a.z + b.z) }
    static func * (a: GeoVector, k: Double) -> GeoVector { GeoVector(x: a.x * k, y: a.y * k, z: a.z * k) }
    var length: Double { dot(self).squareRoot() }
    var normalized: GeoVector { self * (1 / length) }
    /// The angle between two unit vectors, in radians.
    func angle(to other: GeoVector) -> Double { atan2(cross(other).length, dot(other)) }
}

/// The region of a `geoWithin`: a checked box, circle or polygon.
enum GeoRegion: Hashable, Sendable {
    /// Latitudes from `low.latitude` to `high.latitude`, longitudes from `low.longitude` eastwards to
    /// `high.longitude` (across the antimeridian when `low.longitude > high.longitude`), edges included.
    case box(low: GeoPoint, high: GeoPoint)
    /// The points at most `radius` radians from `center`.
    case circle(center: GeoPoint, radius: Double)
    case polygon(GeoPolygon)

    /// A box from its bottom-left and top-right corners.
    ///
    /// - Throws: a message naming what is wrong: a corner out of bounds, or a bottom above the top.
    static func box(_ bottomLeft: GeoPoint, _ topRight: GeoPoint) throws(GeoShapeError) -> GeoRegion {
        for corner in [bottomLeft, topRight] { try corner.checkBounds() }
        guard bottomLeft.latitude <= topRight.latitude else {
            throw GeoShapeError(
                "the box's bottom-left corner \(bottomLeft.description) is north of its top-right corner "
                    + "\(topRight.description): corners are [longitude, latitude]")
        }
        return .box(low: bottomLeft, high: topRight)
    }

    /// A circle from its center and its radius in radians (kilometres / 6378.1, miles / 3963.2).
    static func circle(_ center: GeoPoint, radius: Double) throws(GeoShapeError) -> GeoRegion {
        try center.checkBounds()
        guard radius >= 0 else {
            throw GeoShapeError("the radius of a circle must be a non-negative number of radians, not \(radius)")
        }
        return .circle(center: center, radius: radius)
    }

    /// Whether `point` lies within the region; an invalid point (out of bounds) never does.
    func contains(_ point: GeoPoint) -> Bool {
        guard point.isValid else { return false }
        switch self {
        case .box(let low, let high):
            guard point.latitude >= low.latitude && point.latitude <= high.latitude else { return false }
            // -180 and 180 are one meridian.
            let longitudes = abs(point.longitude) == 180 ? [-180.0, 180.0] : [point.longitude]
            return longitudes.contains { longitude in
                low.longitude <= high.longitude
                    ? longitude >= low.longitude && longitude <= high.longitude
                    : longitude >= low.longitude || longitude <= high.longitude
            }
        case .circle(let center, let radius):
            return center.vector.angle(to: point.vector) <= radius
        case .polygon(let polygon):
            return polygon.contains(point.vector)
        }
    }
}

/// A reason a shape cannot be a `geoWithin` region.
struct GeoShapeError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

extension GeoPoint {
    func checkBounds() throws(GeoShapeError) {
        guard isValid else {
            throw GeoShapeError(
                "longitude/latitude out of bounds in \(description): a point is [longitude, latitude], the longitude "
                    + "within [-180, 180] and the latitude within [-90, 90]")
        }
    }
}

/// A polygon: an outer ring and holes, each a closed ring of great-circle edges, checked as Realm checks them: every
/// ring closed, of at least 3 distinct vertices, without edges that cross; each hole inside the outer ring, none
/// inside another. A ring larger than a hemisphere stands for the smaller region it bounds.
struct GeoPolygon: Hashable, Sendable {
    /// The outer ring, then the holes: each with its interior on the left of its edges, without the closing vertex.
    private(set) var rings: [Ring]

    struct Ring: Hashable, Sendable {
        var vertices: [GeoVector]
        /// A point just inside the ring, to count edge crossings from, one per edge (the edges' own ends make some
        /// of them unusable for a given point).
        var references: [GeoVector]

        /// Whether `point` lies within the ring or on its boundary.
        /// Whether `point` lies on one of the ring's edges.
        func isOnBoundary(_ point: GeoVector) -> Bool {
            let count = vertices.count
            return (0..<count).contains { onArc(point, vertices[$0], vertices[($0 + 1) % count]) }
        }

        func contains(_ point: GeoVector) -> Bool {
            if isOnBoundary(point) { return true }
            let count = vertices.count
            var fallback: Bool?
            for reference in references where reference.dot(point) > -1 + 1e-9 {
                var crossings = 0
                var degenerate = false
                for index in 0..<count {
                    switch crossing(point, reference, vertices[index], vertices[(index + 1) % count]) {
                    case .cross: crossings += 1
                    case .none: break
                    case .degenerate: degenerate = true
                    }
                    if degenerate { break }
                }
                let inside = crossings % 2 == 0
                if !degenerate { return inside }
                if fallback == nil { fallback = inside }
            }
            return fallback ?? false
        }
    }

    /// Checks `rings` (each as written, closed: its first vertex repeated last) and builds the polygon.
    init(rings points: [[GeoPoint]]) throws(GeoShapeError) {
        guard !points.isEmpty else { throw GeoShapeError("a polygon needs at least one ring") }
        var rings: [Ring] = []
        for (number, ring) in points.enumerated() {
            for point in ring { try point.checkBounds() }
            guard let first = ring.first, let last = ring.last else {
                throw GeoShapeError("ring \(number) has no vertices")
            }
            guard first == last else {
                throw GeoShapeError(
                    "ring \(number) is not closed: its first vertex \(first.description) differs from its last "
                        + "\(last.description); repeat the first vertex at the end")
            }
            var vertices: [GeoVector] = []
            for point in ring.dropLast() where vertices.last != point.vector { vertices.append(point.vector) }
            if vertices.count > 1 && vertices.first == vertices.last { vertices.removeLast() }
            guard vertices.count >= 3 else {
                throw GeoShapeError(
                    "ring \(number) must have at least 3 different vertices, \(vertices.count) were given")
            }
            try Self.checkSimple(vertices, ring: number, points: ring)
            // The interior is on the left of the edges, and is the smaller of the two regions the ring bounds.
            if Self.turning(vertices) < 0 { vertices.reverse() }
            rings.append(Ring(vertices: vertices, references: Self.references(vertices)))
        }
        self.rings = rings
        try checkHoles()
    }

    /// Whether `point` lies within the outer ring and within none of the holes (a hole's boundary belongs to the
    /// polygon).
    func contains(_ point: GeoVector) -> Bool {
        guard rings[0].contains(point) else { return false }
        return !rings.dropFirst().contains { hole in !hole.isOnBoundary(point) && hole.contains(point) }
    }

    /// Refuses a ring whose vertices repeat, whose edges join antipodal points, or whose edges cross.
    private static func checkSimple(_ vertices: [GeoVector], ring: Int, points: [GeoPoint]) throws(GeoShapeError) {
        let count = vertices.count
        for index in 0..<count {
            let next = vertices[(index + 1) % count]
            if vertices[index].dot(next) < -1 + 1e-15 {
                throw GeoShapeError(
                    "ring \(ring) is not valid: edge \(index) joins two antipodal points, and no single great circle "
                        + "runs between them; add a vertex between them")
            }
            for other in (index + 1)..<count where vertices[other] == vertices[index] {
                throw GeoShapeError(
                    "ring \(ring) is not valid: vertices \(index) and \(other) are the same point "
                        + "\(points[index].description)")
            }
        }
        for first in 0..<count {
            for second in (first + 2)..<max(first + 2, count) where !(first == 0 && second == count - 1) {
                let result = crossing(
                    vertices[first], vertices[(first + 1) % count], vertices[second], vertices[(second + 1) % count])
                if result == .cross {
                    throw GeoShapeError("ring \(ring) is not valid: edges \(first) and \(second) cross")
                }
            }
        }
    }

    /// Refuses holes outside the outer ring, holes whose edges cross another ring's, and holes inside holes.
    private func checkHoles() throws(GeoShapeError) {
        let outer = rings[0]
        for (index, hole) in rings.enumerated().dropFirst() {
            guard !Self.edgesCross(hole, outer), hole.vertices.allSatisfy(outer.contains) else {
                throw GeoShapeError(
                    "ring \(index) is not inside the first ring: the first ring is the polygon's outline, and every "
                        + "other ring a hole in it")
            }
            for (otherIndex, other) in rings.enumerated().dropFirst() where otherIndex != index {
                if Self.edgesCross(hole, other) {
                    throw GeoShapeError("rings \(min(index, otherIndex)) and \(max(index, otherIndex)) cross")
                }
                if hole.vertices.allSatisfy(other.contains) && !other.vertices.allSatisfy(hole.contains) {
                    throw GeoShapeError(
                        "ring \(index) lies inside ring \(otherIndex): holes cannot be nested in holes")
                }
            }
        }
    }

    private static func edgesCross(_ a: Ring, _ b: Ring) -> Bool {
        for i in a.vertices.indices {
            for j in b.vertices.indices {
                let result = crossing(
                    a.vertices[i], a.vertices[(i + 1) % a.vertices.count], b.vertices[j],
                    b.vertices[(j + 1) % b.vertices.count])
                if result == .cross { return true }
            }
        }
        return false
    }

    /// The sum of the ring's turning angles at its vertices, left turns positive: 2π less the area on the left.
    /// Negative when the region on the left is larger than a hemisphere.
    private static func turning(_ vertices: [GeoVector]) -> Double {
        let count = vertices.count
        var total = 0.0
        for index in 0..<count {
            let a = vertices[(index + count - 1) % count]
            let b = vertices[index]
            let c = vertices[(index + 1) % count]
            let incoming = a.cross(b)
            let outgoing = b.cross(c)
            total += atan2(incoming.cross(outgoing).dot(b), incoming.dot(outgoing))
        }
        return total
    }

    /// For each edge, a point just to its left (inside the ring), near its middle, closer to it than to any other
    /// edge: a crossing count from there starts inside.
    private static func references(_ vertices: [GeoVector]) -> [GeoVector] {
        let count = vertices.count
        var references: [GeoVector] = []
        for index in 0..<count {
            let a = vertices[index]
            let b = vertices[(index + 1) % count]
            let middle = (a + b).normalized
            let left = a.cross(b).normalized
            var nearest = 1e-6
            for other in 0..<count where other != index {
                nearest = min(nearest, distance(middle, vertices[other], vertices[(other + 1) % count]) / 4)
            }
            guard nearest > 1e-12 else { continue }
            references.append((middle + left * nearest).normalized)
        }
        return references
    }
}

/// Whether the minor arcs `a`-`b` and `c`-`d` cross at a point inside both, touch (a vertex of one on the other, or
/// the arcs on one great circle), or neither.
private enum Crossing { case cross, none, degenerate }

private func crossing(_ a: GeoVector, _ b: GeoVector, _ c: GeoVector, _ d: GeoVector) -> Crossing {
    let epsilon = 1e-15
    let ab = a.cross(b)
    let acb = -ab.dot(c)
    let bda = ab.dot(d)
    if abs(acb) < epsilon || abs(bda) < epsilon {
        // c or d lies on the great circle through a and b: a touch only if it lies on the arc itself.
        return onArc(c, a, b) || onArc(d, a, b) ? .degenerate : .none
    }
    if (acb > 0) != (bda > 0) { return .none }
    let cd = c.cross(d)
    let cbd = -cd.dot(b)
    let dac = cd.dot(a)
    if abs(cbd) < epsilon || abs(dac) < epsilon {
        return onArc(a, c, d) || onArc(b, c, d) ? .degenerate : .none
    }
    return (acb > 0) == (cbd > 0) && (acb > 0) == (dac > 0) ? .cross : .none
}

/// Whether `point` lies on the minor arc from `a` to `b` (within about a nanoradian of it).
private func onArc(_ point: GeoVector, _ a: GeoVector, _ b: GeoVector) -> Bool {
    if point == a || point == b { return true }
    let normal = a.cross(b)
    guard abs(normal.dot(point)) <= 1e-15 * max(1, normal.length) else { return false }
    // On the great circle: between a and b when it is on b's side of a and on a's side of b.
    return a.cross(point).dot(normal) >= 0 && point.cross(b).dot(normal) >= 0 && point.dot(a + b) > 0
}

/// The angle from `point` to the nearest point of the minor arc `a`-`b`, in radians.
private func distance(_ point: GeoVector, _ a: GeoVector, _ b: GeoVector) -> Double {
    let normal = a.cross(b)
    let length = normal.length
    if length > 0 {
        let unit = normal * (1 / length)
        // The point's projection on the great circle, when it falls between a and b.
        let projected = point + unit * -unit.dot(point)
        if projected.length > 0 {
            let foot = projected.normalized
            if a.cross(foot).dot(normal) >= 0 && foot.cross(b).dot(normal) >= 0 {
                return abs(asin(max(-1, min(1, unit.dot(point)))))
            }
        }
    }
    return min(point.angle(to: a), point.angle(to: b))
}
