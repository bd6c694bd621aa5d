# Copyright 2026 manip_control contributors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
manip-bag: maintenance of rosbag2 bags without ROS (modelled on ``ros2 bag``).

``manip-bag reindex DIR``
    Rebuild ``DIR/metadata.yaml`` (metadata version 8) from the storage files, like
    ``ros2 bag reindex``. A bag whose recorder was killed has no ``metadata.yaml`` and, in MCAP,
    a file without summary: the file is rewritten as a finished MCAP file holding the same
    messages (up to its last complete chunk) so that rosbags, ``ros2 bag`` and the ``mcap``
    tools read it; a sqlite3 file gets its write-ahead log folded in. An existing
    ``metadata.yaml`` is replaced.

``manip-bag info BAG``
    Storage, metadata version, message counts (from the data) and time range; whether the bag
    was recovered (its writer did not finish it) and what repairs it, what a complete file
    lacks, where ``metadata.yaml`` disagrees with the data, and the result of checking every
    MCAP chunk CRC (each damaged chunk is named with its time range). Never changes the bag.

Exit codes: 0 success, 1 ``info`` found damaged data (listed), 2 error (one line on stderr
naming the file and the problem). Output cut short by its reader (``| head``) is not an
error.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys

from manip_control.bag_io import BagError
from manip_control.bag_io import BagReader
from manip_control.bag_storage import ns_text
from manip_control.bag_storage import reindex
from manip_control.bag_storage import StorageError
from manip_control.bag_storage import SUFFIXES

__all__ = ['main']


def _info(path: str) -> int:
    with BagReader(path, skip_corrupt=True) as r:
        checked = r.verify()
        print(f'bag: {path}')
        print(f'storage: {r.storage}, metadata version: {r.metadata_version or "none"}, '
              f'files: {", ".join(f.name for f in r.files)}')
        span = (r.end_ns - r.start_ns) / 1e9 if r.message_count else 0.0
        print(f'messages: {r.message_count}, from {ns_text(r.start_ns)} s to '
              f'{ns_text(r.end_ns)} s ({span:.3f} s)')
        if r.recovered:
            print(f'recovered: {r.recovered_reason}')
            where = r.path if r.path.is_dir() else Path(r.path).parent
            what = ('finishes the MCAP file, so that standard tools (rosbags, ros2 bag, mcap) '
                    'read it' if r.storage == 'mcap' else
                    'folds the write-ahead log in and writes metadata.yaml')
            others = [] if r.path.is_dir() else sorted(
                p.name for p in where.iterdir()
                if p.is_file() and p.suffix in SUFFIXES and p.name != r.path.name)
            if others:
                # reindex joins every storage file of a folder: this one needs its own
                own = where / r.path.stem
                print(f'repair: its folder also holds {", ".join(others)}, which reindex would '
                      f'join to it: move it into a folder of its own (mkdir {own} && mv '
                      f'{r.path} {own}/), then manip-bag reindex {own} {what}')
            else:
                print(f'repair: manip-bag reindex {where} {what}')
        for note in r.notes:
            print(f'note: {note}')
        if r.storage == 'mcap':
            damaged = r.corrupt
            print(f'checksums: {checked} chunk CRCs checked, '
                  + (f'{len(damaged)} damaged' if damaged else 'all match'))
            for c in damaged:
                print(f'damaged: {c.describe()}')
        else:
            damaged = []
            print('checksums: none (sqlite3 files carry no checksums)')
        for t in r.topics.values():
            extra = '' if t.decodable else f'  (skipped: {t.reason})'
            print(f'  {t.name}  {t.msgtype}  {t.count}{extra}')
    return 1 if damaged else 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='manip-bag',
                                description='rosbag2 bag maintenance without ROS.')
    sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')
    r = sub.add_parser('reindex', help='rebuild metadata.yaml from the storage files (and '
                       'finish an unfinished MCAP file)')
    r.add_argument('bag', metavar='DIR', help='bag directory')
    i = sub.add_parser('info', help='print what a bag holds')
    i.add_argument('bag', metavar='BAG', help='bag directory or .mcap / .db3 file')
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``manip-bag``; returns the exit code (0 ok, 2 error)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == 'info':
            code = _info(args.bag)
            sys.stdout.flush()
            return code
        result = reindex(args.bag, log=lambda text: print(text, file=sys.stderr))
        counts = ', '.join(f'{t} {n}' for t, n in result['topics'].items())
        print(f'{args.bag}/metadata.yaml written (version 8, {result["storage"]}): '
              f'{result["message_count"]} messages: {counts}')
        if result['repaired']:
            print(f'finished: {", ".join(result["repaired"])}')
        return 0
    except (StorageError, BagError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _reader_gone()
    except OSError as exc:
        print(f'error: {args.bag}: {exc.strerror or exc}', file=sys.stderr)
        return 2


def _reader_gone() -> int:
    """Stop printing quietly: the reader of stdout went away (``| head``), not an error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())    # the interpreter's final flush goes nowhere
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
