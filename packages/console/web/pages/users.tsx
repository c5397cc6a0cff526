import { useState } from 'preact/hooks';
import { call } from '../api.js';
import { Alert, Confirm, Page, useLoad, when } from '../ui.js';
import type { ApiUser } from '../api.js';

/** UsersPage lists users and creates, renames and deletes them (headway users create|rename|delete). */
export function UsersPage() {
  const users = useLoad(() => call('get', '/api/v1/user').then((a) => a.users));
  const [name, setName] = useState('');
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const [doomed, setDoomed] = useState<ApiUser>();

  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const u = await call('post', '/api/v1/user', { body: { name } });
      setNotice(`User ${u.user.name} created`);
      setError(undefined);
      setName('');
      users.reload();
    } catch (err) { setError(err); }
  };
  const remove = async (u: ApiUser) => {
    setDoomed(undefined);
    try {
      await call('delete', '/api/v1/user/{id}', { params: { id: u.id } });
      setNotice(`User ${u.name} deleted`);
      setError(undefined);
      users.reload();
    } catch (err) { setError(err); }
  };

  return (
    <Page title="Users">
      <form class="inline-form" onSubmit={create}>
        <label for="new-user">New user</label>
        <input id="new-user" name="name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
        <button type="submit">Create user</button>
      </form>
      <Alert error={error ?? users.error} notice={notice} />
      <table class="stack">
        <caption class="visually-hidden">Users</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">E-mail</th><th scope="col">Created</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
        <tbody>
          {(users.value ?? []).map((u) => (
            <tr key={u.id}>
              <td data-label="Name">{u.name}</td>
              <td data-label="E-mail">{u.email}</td>
              <td data-label="Created">{when(u.createdAt)}</td>
              <td><button type="button" class="danger" aria-label={`Delete user ${u.name}`} onClick={() => setDoomed(u)}>Delete</button></td>
            </tr>
          ))}
        </tbody>
      </table>
      <Confirm open={!!doomed} title="Delete user" confirm="Delete" onCancel={() => setDoomed(undefined)} onConfirm={() => doomed && void remove(doomed)}>
        <p>Delete user {doomed?.name}? This cannot be undone.</p>
      </Confirm>
    </Page>
  );
}
