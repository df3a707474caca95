import Foundation

// RChat (the MongoDB flexible-sync sample chat app): its schemas as App Services prints them (JSON Schema), copied
// verbatim from the published article.
package enum RChat {
    package static let user = #"""
        {
          "bsonType": "object",
          "properties": {
            "_id": {
              "bsonType": "string"
            },
            "conversations": {
              "bsonType": "array",
              "items": {
                "bsonType": "object",
                "properties": {
                  "displayName": {
                    "bsonType": "string"
                  },
                  "id": {
                    "bsonType": "string"
                  },
                  "members": {
                    "bsonType": "array",
                    "items": {
                      "bsonType": "object",
                      "properties": {
                        "membershipStatus": {
                          "bsonType": "string"
                        },
                        "userName": {
                          "bsonType": "string"
                        }
                      },
                      "required": [
                        "membershipStatus",
                        "userName"
                      ],
                      "title": "Member"
                    }
                  },
                  "unreadCount": {
                    "bsonType": "long"
                  }
                },
                "required": [
                  "unreadCount",
                  "id",
                  "displayName"
                ],
                "title": "Conversation"
              }
            },
            "lastSeenAt": {
              "bsonType": "date"
            },
            "presence": {
              "bsonType": "string"
            },
            "userName": {
              "bsonType": "string"
            },
            "userPreferences": {
              "bsonType": "object",
              "properties": {
                "avatarImage": {
                  "bsonType": "object",
                  "properties": {
                    "_id": {
                      "bsonType": "string"
                    },
                    "date": {
                      "bsonType": "date"
                    },
                    "picture": {
                      "bsonType": "binData"
                    },
                    "thumbNail": {
                      "bsonType": "binData"
                    }
                  },
                  "required": [
                    "_id",
                    "date"
                  ],
                  "title": "Photo"
                },
                "displayName": {
                  "bsonType": "string"
                }
              },
              "required": [],
              "title": "UserPreferences"
            }
          },
          "required": [
            "_id",
            "userName",
            "presence"
          ],
          "title": "User"
        }
        """#

    package static let chatster = #"""
        {
          "bsonType": "object",
          "properties": {
            "_id": {
              "bsonType": "string"
            },
            "avatarImage": {
              "bsonType": "object",
              "properties": {
                "_id": {
                  "bsonType": "string"
                },
                "date": {
                  "bsonType": "date"
                },
                "picture": {
                  "bsonType": "binData"
                },
                "thumbNail": {
                  "bsonType": "binData"
                }
              },
              "required": [
                "_id",
                "date"
              ],
              "title": "Photo"
            },
            "displayName": {
              "bsonType": "string"
            },
            "lastSeenAt": {
              "bsonType": "date"
            },
            "presence": {
              "bsonType": "string"
            },
            "userName": {
              "bsonType": "string"
            }
          },
          "required": [
            "_id",
            "presence",
            "userName"
          ],
          "title": "Chatster"
        }
        """#

    package static let chatMessage = #"""
        {
          "bsonType": "object",
          "properties": {
            "_id": {
              "bsonType": "string"
            },
            "author": {
              "bsonType": "string"
            },
            "authorID": {
              "bsonType": "string"
            },
            "conversationID": {
              "bsonType": "string"
            },
            "image": {
              "bsonType": "object",
              "properties": {
                "_id": {
                  "bsonType": "string"
                },
                "date": {
                  "bsonType": "date"
                },
                "picture": {
                  "bsonType": "binData"
                },
                "thumbNail": {
                  "bsonType": "binData"
                }
              },
              "required": [
                "_id",
                "date"
              ],
              "title": "Photo"
            },
            "location": {
              "bsonType": "array",
              "items": {
                "bsonType": "double"
              }
            },
            "text": {
              "bsonType": "string"
            },
            "timestamp": {
              "bsonType": "date"
            }
          },
          "required": [
            "_id",
            "authorID",
            "conversationID",
            "text",
            "timestamp"
          ],
          "title": "ChatMessage"
        }
        """#

    /// The three together, as one JSON array.
    package static var schemas: String { "[" + [user, chatster, chatMessage].joined(separator: ",") + "]" }

    /// The article's sync permissions (the flexible-sync form): a user reads and writes its own User object only;
    /// anyone reads every Chatster and writes none (a trigger maintains them); anyone reads every ChatMessage, and
    /// writes those it authored.
    package static let rules = #"""
        {
           "rules": {
               "User": [
                   {
                       "name": "anyone",
                       "applyWhen": {},
                       "read": {
                           "_id": "%%user.id"
                       },
                       "write": {
                           "_id": "%%user.id"
                       }
                   }
               ],
               "Chatster": [
                   {
                       "name": "anyone",
                       "applyWhen": {},
                       "read": true,
                       "write": false
                   }
               ],
               "ChatMessage": [
                   {
                       "name": "anyone",
                       "applyWhen": {},
                       "read": true,
                       "write": {
                           "authorID": "%%user.id"
                       }
                   }
               ]
           },
           "defaultRoles": [
               {
                   "name": "all",
                   "applyWhen": {},
                   "read": {},
                   "write": {}
               }
           ]
        }
        """#
}
