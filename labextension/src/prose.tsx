/**
 * Server sentences in the panel: their `backticked` commands shown as code.
 */
import * as React from 'react';

import { proseParts } from './format';

/** A server sentence with its `backticked` commands shown as code. */
export function Prose(props: { text: string }): JSX.Element {
  return (
    <>
      {proseParts(props.text).map((part, i) =>
        part.code ? <code key={i}>{part.text}</code> : part.text
      )}
    </>
  );
}
