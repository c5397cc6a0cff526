// The cluster relay mesh: the mesh key every instance derives from the shared control key,
// and the relay URL derived from an instance's registered address.
import t from 'tap';
import { derpMeshKey, derpUrlOf } from '../src/cluster/derpmesh.js';

t.test('derpMeshKey is the same for one control key, differs for another, and is not the key', async (t) => {
  const key = Buffer.alloc(32, 7);
  const mesh = derpMeshKey(key);
  t.match(mesh, /^[0-9a-f]{64}$/, '64 hex characters');
  t.equal(derpMeshKey(Buffer.from(key)), mesh, 'every instance sharing the control key derives the same mesh key');
  t.not(derpMeshKey(Buffer.alloc(32, 8)), mesh, 'another control key gives another mesh key');
  t.notOk(mesh.includes(key.toString('hex')), 'the control key does not appear in it');
});

t.test('derpUrlOf maps registered addresses to relay URLs and refuses unusable ones', async (t) => {
  t.equal(derpUrlOf('http://127.0.0.1:8080'), 'http://127.0.0.1:8080/derp');
  t.equal(derpUrlOf('https://headway.example.com/'), 'https://headway.example.com/derp');
  t.equal(derpUrlOf('https://headway.example.com:8443/some/path'), 'https://headway.example.com:8443/derp');
  t.equal(derpUrlOf('10.0.0.5:8080'), 'http://10.0.0.5:8080/derp', 'host:port means plain HTTP');
  t.equal(derpUrlOf('[fd00::1]:8080'), 'http://[fd00::1]:8080/derp');
  t.equal(derpUrlOf('127.0.0.1:0'), undefined, 'port 0 (not listening yet) names nothing reachable');
  t.equal(derpUrlOf('http://0.0.0.0:8080'), undefined, 'a wildcard bind address names no host to dial');
  t.equal(derpUrlOf('http://[::]:8080'), undefined);
  t.equal(derpUrlOf('ftp://host:21'), undefined);
  t.equal(derpUrlOf('not a url::'), undefined);
});
