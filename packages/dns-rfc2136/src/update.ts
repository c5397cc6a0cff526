import { randomInt } from 'node:crypto';
import { connect } from 'node:net';
import dnsPacket from 'dns-packet';
import { findTsig, sign, TSIG_ERRORS, verifyReply, type TsigKey } from './tsig.js';

/** OPCODE_UPDATE in the header's flags (RFC 2136 §2.2: opcode 5, bits 11-14). */
const OPCODE_UPDATE = 5 << 11;

/** RCODES explains the answers an update may get (RFC 2136 §2.2, RFC 8945 §5.3). */
const RCODES: Record<number, string> = {
  1: 'FORMERR: the server could not read the update',
  2: 'SERVFAIL: the server failed to apply the update',
  4: 'NOTIMP: the server does not take dynamic updates',
  5: 'REFUSED: the server does not let this key update this zone (check its update ACL or policy)',
  8: 'NXRRSET: a prerequisite failed',
  9: 'NOTAUTH: the server is not authoritative for the zone, or refused the TSIG key',
  10: 'NOTZONE: a name is outside the zone',
};

export interface UpdateClientOptions {
  host: string;
  port: number;
  /** zone is the zone the updates go to (its apex, no trailing dot). */
  zone: string;
  key: TsigKey;
  /** ttl of the records added, in seconds. */
  ttl: number;
  timeoutMs: number;
  /** nowSeconds is the signing time (tests move it to prove BADTIME is reported). */
  nowSeconds?: () => number;
}

type Update = { name: string; type: 'TXT'; class: 'IN' | 'ANY'; ttl: number; data: string[] };

/**
 * UpdateClient sends RFC 2136 dynamic updates signed with TSIG over TCP, one
 * connection per update, and checks the signed reply. setTxt replaces the TXT
 * record set at a name in one update (delete the set, add each value), so the zone
 * never holds a mix of old and new values.
 */
export class UpdateClient {
  constructor(private readonly o: UpdateClientOptions) {}

  /** inZone throws unless `fqdn` is inside the configured zone. */
  private inZone(fqdn: string): string {
    const name = fqdn.replace(/\.$/, '').toLowerCase();
    if (name !== this.o.zone && !name.endsWith(`.${this.o.zone}`)) throw new Error(`${name} is not inside the zone ${this.o.zone} (the plugin's zone option)`);
    return name;
  }

  async setTxt(fqdn: string, values: string[]): Promise<void> {
    const name = this.inZone(fqdn);
    await this.send([
      { name, type: 'TXT', class: 'ANY', ttl: 0, data: [] },
      ...values.map((v): Update => ({ name, type: 'TXT', class: 'IN', ttl: this.o.ttl, data: [v] })),
    ]);
  }

  async removeTxt(fqdn: string): Promise<void> {
    await this.send([{ name: this.inZone(fqdn), type: 'TXT', class: 'ANY', ttl: 0, data: [] }]);
  }

  /** send signs one UPDATE message, sends it and throws an Error naming what the server answered unless it applied it. */
  private async send(updates: Update[]): Promise<void> {
    const { zone, key } = this.o;
    const id = randomInt(0, 65536);
    const message = dnsPacket.encode({
      id, type: 'query', flags: OPCODE_UPDATE,
      questions: [{ name: zone, type: 'SOA', class: 'IN' }],
      // The update section is the message's third section (dns-packet's `authorities`); class ANY with no data deletes a set.
      authorities: updates as unknown as dnsPacket.Answer[],
    });
    const now = this.o.nowSeconds?.() ?? Math.floor(Date.now() / 1000);
    const { signed, mac } = sign(message, key, now);
    const reply = await this.exchange(signed);
    if (reply.length < 12 || reply.readUInt16BE(0) !== id) throw new Error(`${this.where()} answered with a reply to another message`);
    const rcode = reply.readUInt16BE(2) & 0xf;
    let tsig;
    try {
      tsig = findTsig(reply);
    } catch (err) {
      throw new Error(`${this.where()} sent a reply that cannot be read: ${(err as Error).message}`);
    }
    if (tsig?.error) throw new Error(`${this.where()} refused the TSIG key ${key.name} (${key.algorithm}): ${TSIG_ERRORS[tsig.error] ?? `TSIG error ${tsig.error}`}`);
    if (rcode !== 0) throw new Error(`${this.where()} refused the update of ${updates[0]!.name}: ${RCODES[rcode] ?? `rcode ${rcode}`}`);
    if (!tsig) throw new Error(`${this.where()} sent an unsigned reply to a signed update`);
    if (!verifyReply(tsig, key, mac)) throw new Error(`${this.where()} signed its reply with another key: the reply's TSIG does not verify`);
  }

  private where(): string { return `the DNS server at ${this.o.host}:${this.o.port}`; }

  /** exchange sends a message over TCP (length-prefixed, RFC 1035 §4.2.2) and reads one reply. */
  private exchange(message: Buffer): Promise<Buffer> {
    const { host, port, timeoutMs } = this.o;
    return new Promise((resolve, reject) => {
      const socket = connect({ host, port });
      let got = Buffer.alloc(0);
      const fail = (err: Error) => { socket.destroy(); reject(err); };
      socket.setTimeout(timeoutMs, () => fail(new Error(`no answer from ${this.where()} within ${timeoutMs} ms`)));
      socket.once('error', (err) => fail(new Error(`${this.where()}: ${err.message}`)));
      socket.on('data', (chunk: Buffer) => {
        got = Buffer.concat([got, chunk]);
        if (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0)) {
          socket.destroy();
          resolve(got.subarray(2, 2 + got.readUInt16BE(0)));
        }
      });
      socket.once('end', () => fail(new Error(`${this.where()} closed the connection without answering`)));
      const prefix = Buffer.alloc(2);
      prefix.writeUInt16BE(message.length);
      socket.write(Buffer.concat([prefix, message]));
    });
  }
}
