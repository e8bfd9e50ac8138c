from gshmem._errors import *  # noqa
