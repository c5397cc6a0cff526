import { MachineDetail } from './machines/detail.js';
import { MachineList } from './machines/list.js';

/**
 * MachinesPage: every machine with search, filters and live online state (#/machines?user=…), or one machine and
 * the changes `headway nodes` makes (#/machines/<id>).
 */
export function MachinesPage(props: { arg?: string }) {
  return props.arg && /^\d+$/.test(props.arg) ? <MachineDetail id={props.arg} /> : <MachineList />;
}
