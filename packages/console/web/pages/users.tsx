import { useEffect, useRef, useState } from 'preact/hooks';
import { call } from '../api.js';
import { Alert, Confirm, Page, useLoad, when } from '../ui.js';
import type { ApiUser } from '../api.js';
import { useLive } from '../live.js';

/** UsersPage lists users and creates, renames and deletes them (headway users create|rename|delete). */
export function UsersPage() {
  const users = useLoad(() => call('get', '/api/v1/user').then((a) => a.users));
  // Users made, renamed or deleted elsewhere (the CLI, another administrator, a login) show without a reload.
  useLive({ node: () => undefined, changed: (events) => { if (events === undefined) users.reload(); } });
  const [name, setName] = useState('');
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const [doomed, setDoomed] = useState<ApiUser>();
  const [renaming, setRenaming] = useState<{ user: ApiUser; name: string }>();
  const renameInput = useRef<HTMLInputElement>(null);
  const renamingId = renaming?.user.id;
  // The name field takes the focus when it opens, so the keyboard goes on from the button that opened it.
  useEffect(() => { if (renamingId !== undefined) renameInput.current?.focus(); }, [renamingId]);

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
  const rename = async (e: Event) => {
    e.preventDefault();
    if (!renaming) return;
    try {
      const u = await call('post', '/api/v1/user/{id}/rename/{newName}', { params: { id: renaming.user.id, newName: renaming.name } });
      setNotice(`User ${renaming.user.name} renamed to ${u.user.name}`);
      setError(undefined);
      setRenaming(undefined);
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
              <td data-label="Name">
                {renaming?.user.id === u.id ? (
                  <form class="inline-form rename" onSubmit={rename} onKeyDown={(e) => { if (e.key === 'Escape') setRenaming(undefined); }}>
                    <label class="visually-hidden" for={`rename-${u.id}`}>New name for {u.name}</label>
                    <input ref={renameInput} id={`rename-${u.id}`} required value={renaming.name} onInput={(e) => setRenaming({ user: u, name: e.currentTarget.value })} />
                    <button type="submit">Save</button>
                    <button type="button" onClick={() => setRenaming(undefined)}>Cancel</button>
                  </form>
                ) : u.name}
              </td>
              <td data-label="E-mail">{u.email}</td>
              <td data-label="Created">{when(u.createdAt)}</td>
              <td class="actions">
                <button type="button" aria-label={`Rename user ${u.name}`} onClick={() => setRenaming({ user: u, name: u.name })}>Rename</button>
                <button type="button" class="danger" aria-label={`Delete user ${u.name}`} onClick={() => setDoomed(u)}>Delete</button>
              </td>
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
