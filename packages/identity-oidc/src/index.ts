import { asValue } from 'awilix';
import { IDENTITY, type AdapterDescriptor } from '@headway/core/ports';
import { OidcIdentity } from './oidc.js';

export { OidcIdentity, CALLBACK_PATH, checkAllowed, providerIdOf, readClientSecret } from './oidc.js';

/**
 * The identity port's default adapter: loaded by the server when `oidc.issuer` is
 * set (and no identity plugin is listed), configured by the `oidc:` block.
 */
const descriptor: AdapterDescriptor = {
  port: 'identity',
  id: 'oidc',
  register({ container, config, logger }) {
    container.register(IDENTITY, asValue(new OidcIdentity(config.oidc, config.server_url, logger)));
  },
};

export default descriptor;
