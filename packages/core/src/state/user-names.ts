import type { User } from '../domain.js';
import type { Logger } from '../log.js';

/**
 * sameUserName compares user names without case: `alice` and `Alice` are one user, as
 * login names are, so a new name must differ from every other in more than case.
 */
export function sameUserName(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase();
}

/**
 * warnCaseDuplicates logs, at start-up, users stored before names were unique without
 * case, naming them so an admin can rename all but one; they keep working meanwhile
 * (an exact spelling still finds each).
 */
export function warnCaseDuplicates(users: User[], logger: Logger): void {
  const groups = new Map<string, User[]>();
  for (const u of users) groups.set(u.name.toLowerCase(), [...(groups.get(u.name.toLowerCase()) ?? []), u]);
  for (const same of groups.values()) {
    if (same.length < 2) continue;
    logger.warn('users differ only by case; user names are now unique without case, rename all but one (headway users rename -i ID -r NEW)', {
      users: same.map((u) => `${u.name} (id ${u.id})`).join(', '),
    });
  }
}
