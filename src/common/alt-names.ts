/**
 * A certificate's subject alternative names as Node writes them: the one reading of
 * `subjectaltname` (node:tls' PeerCertificate) and `subjectAltName` (node:crypto's
 * X509Certificate), for the name of a client (src/api/authz.ts) and the names of a peer
 * (src/common/peer-tls.ts).
 *
 * Node writes each name as its type, a colon and its value (`DNS:n1`, `IP Address:10.0.0.1`,
 * `URI:spiffe://c/s`, `email:a@b`, `othername:XmppAddr:x`, `DirName:CN=x`, `Registered ID:1.2.3`),
 * the names joined by ", ". A value holding a comma, a quote, an apostrophe, a backslash or a
 * control character (or, for most types, any byte outside printable ASCII) is written as a JSON
 * string instead (`DNS:"a\u002cb"`), its commas escaped too: a comma outside quotes therefore
 * always ends a name, and a value, however crafted, cannot spell a second name of its own. Read
 * any other way (split on ", ", cut at the first colon) such a name kept its quotes and escapes.
 */

/** One subject alternative name: its type as Node writes it, and its value, unquoted. */
export interface AltName {
  /** `DNS`, `IP Address`, `URI`, `email`, `othername`, `DirName`, `Registered ID`, ... */
  readonly type: string;
  /**
   * The value as the certificate holds it. An othername's is its kind and value
   * (`XmppAddr:x`, or `<unsupported>`), as Node writes it.
   */
  readonly value: string;
}

/**
 * One name at the sticky regex's lastIndex: its type (no colon, comma or quote in any of Node's),
 * then either a JSON string (group 2) or a value that holds neither a quote nor a comma (group 3:
 * Node quotes any that does), then ", " or the end. The alternatives of the string's body are
 * disjoint, so it reads in one pass, whatever the certificate holds.
 */
const ALT_NAME = /([^:,"]+):(?:("(?:[^"\\]|\\.)*")|([^",]*))(?:, |$)/y;

/**
 * The subject alternative names in `subjectAltName` as Node writes it, in order. A name it does
 * not write (no type, a string that does not end or does not parse, a value followed by anything
 * but ", ") ends the list there: the names before it, never a guess at it or at what follows.
 */
export function altNamesOf(subjectAltName: string): AltName[] {
  const names: AltName[] = [];
  ALT_NAME.lastIndex = 0;
  while (ALT_NAME.lastIndex < subjectAltName.length) {
    const m = ALT_NAME.exec(subjectAltName);
    if (m === null) break;
    const value = m[2] === undefined ? m[3] : jsonString(m[2]);
    if (value === undefined) break;
    names.push({ type: m[1] as string, value });
  }
  return names;
}

/** The string a JSON string literal spells; undefined for one JSON.parse refuses (`"\q"`). */
function jsonString(literal: string): string | undefined {
  try {
    return JSON.parse(literal) as string;
  } catch {
    return undefined;
  }
}
